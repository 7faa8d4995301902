"""The ``tool`` kind: tools in the user's words, with a unit-conversion example, and questions whose answers need them.

The example is a tool a small model cannot replace with its own guess: it converts 37 furlongs to meters with a
lookup table, and the model learns to call it with the value and the two units copied from the question, then to
copy the result into ``<answer>...</answer>`` (``answer_match``). A package of several tools (``--tool NAME``
repeated) shares the kinds of units among them (``dimensions``): each tool converts its own, and each row's question
needs one of them, so the model also learns which tool to call. The rows' ground truths are computed by the
generated tool modules themselves (their source is executed here), so the data and the tools cannot disagree.
"""

from __future__ import annotations

import json
import keyword
import random
import re
import textwrap
from typing import Any

from agentr1_core.scaffold.common import Kind, Rows, fill, words

# One unit's size in its dimension's base unit (meter, gram, liter, second, joule, square meter), and plurals that
# are not name + "s". One tool converts the first three; more tools share the first max(3, tools) among them.
UNITS: dict[str, dict[str, float]] = {
    "length": {"meter": 1.0, "kilometer": 1000.0, "centimeter": 0.01, "inch": 0.0254, "foot": 0.3048,
               "yard": 0.9144, "mile": 1609.344, "furlong": 201.168},
    "mass": {"gram": 1.0, "kilogram": 1000.0, "ounce": 28.349523125, "pound": 453.59237, "stone": 6350.29318},
    "volume": {"liter": 1.0, "milliliter": 0.001, "cup": 0.2365882365, "pint": 0.473176473,
               "gallon": 3.785411784},
    "time": {"second": 1.0, "minute": 60.0, "hour": 3600.0, "day": 86400.0, "week": 604800.0},
    "energy": {"joule": 1.0, "kilojoule": 1000.0, "calorie": 4.184, "kilocalorie": 4184.0, "watt-hour": 3600.0},
    "area": {"square meter": 1.0, "hectare": 10000.0, "acre": 4046.8564224, "square foot": 0.09290304,
             "square mile": 2589988.110336},
}
PLURALS = {"inch": "inches", "foot": "feet", "square foot": "square feet"}
DIMENSIONS = tuple(UNITS)
MAX_TOOLS = len(DIMENSIONS)
WHAT = {"length": "lengths", "mass": "masses", "volume": "volumes", "time": "durations", "energy": "energies",
        "area": "areas"}
# Checks of the example's own tests, by dimension: (value, from, to, result).
CASES = {
    "length": [(1, "mile", "meter", "1609.34"), (3, "feet", "inches", "36"), (10, "centimeters", "inches", "3.94"),
               (37, "furlongs", "meters", "7443.22")],
    "mass": [(2, "Pounds", "ounces", "32"), (3, "kilograms", "grams", "3000")],
    "volume": [(5, "liters", "milliliter", "5000"), (2, "pints", "cups", "4")],
    "time": [(3, "hours", "minutes", "180"), (2, "weeks", "days", "14")],
    "energy": [(2, "kilocalories", "calories", "2000"), (1, "watt-hour", "joules", "3600")],
    "area": [(3, "hectares", "square meters", "30000"), (10, "square feet", "square meters", "0.93")],
}
RESERVED = ("plugin", "configs", "data", "package")  # the package's own modules and folders, tests/test_package.py


def check_tools(tools: list[str]) -> None:
    """Refuse tool names that cannot be a module and a registered name of their own (``ValueError``, one line)."""
    seen: set[str] = set()
    for tool in tools:
        if not re.fullmatch(r"[a-z][a-z0-9_]*", tool):
            raise ValueError(f"tool name {tool!r} must be lower-case letters, digits or '_', starting with a letter")
        if keyword.iskeyword(tool):
            raise ValueError(f"tool name {tool!r} is a Python keyword; it cannot name a module")
        if tool in RESERVED:
            raise ValueError(f"tool name {tool!r} is taken by the package itself (not: {', '.join(RESERVED)})")
        if tool in seen:
            raise ValueError(f"tool name {tool!r} is given twice")
        seen.add(tool)
    if len(tools) > MAX_TOOLS:
        raise ValueError(f"at most {MAX_TOOLS} tools: the example shares {MAX_TOOLS} kinds of units among them "
                         f"(got {len(tools)}); add more tools to the package by hand")


def dimensions(count: int) -> list[list[str]]:
    """The dimensions each of ``count`` tools converts: the first ``max(3, count)``, dealt out in turn."""
    used = DIMENSIONS[:max(3, count)]
    return [[d for j, d in enumerate(used) if j % count == i] for i in range(count)]


def _table(value: dict[str, dict[str, float]]) -> str:
    """The units table as Python source, one unit a line."""
    lines = ["{"]
    for dimension, units in value.items():
        lines.append(f"    {json.dumps(dimension)}: {{")
        lines += [f"        {json.dumps(unit)}: {size!r}," for unit, size in units.items()]
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines)


def _plural(unit: str) -> str:
    return PLURALS.get(unit, unit + "s")


def _tool_fields(tool: dict[str, Any]) -> dict[str, Any]:
    """One tool's units, and the text of its description and tests, from the dimensions it converts."""
    dims = dimensions(tool["count"])[tool["index"]]
    own = {unit for d in dims for unit in UNITS[d]}
    cases = [case for d in dims for case in CASES[d]]
    checks = [f'    unknown = converted(1, "parsec", "{_plural(next(iter(UNITS[dims[0]])))}")',
              '    assert unknown.error == "exception" and "unknown unit" in unknown.text']
    if len(dims) > 1:
        a, b = (next(iter(UNITS[d])) for d in dims[:2])
        checks += [f'    mixed = converted(1, "{a}", "{b}")',
                   '    assert mixed.error == "exception" and "cannot convert" in mixed.text']
    return {"dimensions": dims, "units": _table({d: UNITS[d] for d in dims}),
            "plurals": json.dumps({u: p for u, p in PLURALS.items() if u in own}),
            "dimension_words": words(dims, "or"),
            "cases": "\n".join(f'        ({value}, "{a}", "{b}", "{result}"),' for value, a, b, result in cases),
            "bad_unit_checks": "\n".join(checks)}


def _package_fields(fields: dict[str, Any]) -> dict[str, str]:
    tools = fields["components"]
    idents = [t["ident"] for t in tools]
    if len(tools) == 1:
        prompt = (f"    Answer the user's unit conversion question. First call the {idents[0]} tool with the value "
                  f"and the two units,\n    then reply with only the result as <answer>NUMBER</answer>.")
    else:
        which = [f"{t['ident']} for {words([WHAT[d] for d in dims])}" for t, dims in zip(tools, dimensions(len(tools)))]
        prompt = textwrap.fill(f"Answer the user's unit conversion question. First call the tool for its kind of unit "
                               f"with the value and the two units ({'; '.join(which)}), then reply with only the "
                               f"result as <answer>NUMBER</answer>.", width=116, initial_indent="    ",
                               subsequent_indent="    ")
    prompt_tokens = 1024 if len(tools) <= 4 else 2048  # every tool's schema is in the prompt: ~150 tokens a tool
    return {"tool_list": ", ".join(idents), "system_prompt": prompt, "max_prompt_tokens": str(prompt_tokens),
            "tools_called": f"the {idents[0]} tool" if len(idents) == 1 else f"the {words(idents)} tools"}


QUESTIONS = ("How many {to} are in {value} {frm}?", "Convert {value} {frm} to {to}.")


def rows(fields: dict[str, Any]) -> tuple[Rows, Rows]:
    """200 training and 32 held-out questions (disjoint), each answered by one call of the tool that converts its
    kind of unit; every tool has held-out questions."""
    tool_of, convert_of = {}, {}
    for tool in fields["components"]:
        namespace: dict[str, Any] = {}
        code = fill(COMPONENT, {**fields, **tool})
        exec(compile(code, f"<generated tool {tool['ident']}>", "exec"), namespace)  # the generated module's code
        for dimension in tool["dimensions"]:
            tool_of[dimension], convert_of[dimension] = tool["ident"], namespace["convert"]
    rng = random.Random(0)
    seen: set[str] = set()
    out: Rows = []
    while len(out) < 232:
        dimension = rng.choice(sorted(tool_of))
        frm, to = rng.sample(sorted(UNITS[dimension]), 2)
        value = rng.randint(2, 99)
        answer = convert_of[dimension](value, frm, to)
        if not 0.1 <= float(answer) < 1e6:
            continue
        question = rng.choice(QUESTIONS).format(value=value, frm=_plural(frm), to=_plural(to))
        if question in seen:
            continue
        seen.add(question)
        call = {"name": tool_of[dimension], "arguments": {"value": value, "from_unit": _plural(frm),
                                                          "to_unit": _plural(to)}}
        out.append({
            "prompt": question,
            "data_source": f"{fields['plugin_ident']}_{dimension}",
            "reward_model": {"ground_truth": answer},
            "expert_actions": [f"<tool_call>{json.dumps(call)}</tool_call>", f"<answer>{answer}</answer>"],
            "extra_info": {"index": len(out)},
        })
    train, val = out[:200], out[200:]
    missing = set(tool_of.values()) - {json.loads(r["expert_actions"][0][11:-12])["name"] for r in val}
    if missing:
        raise RuntimeError(f"no held-out question for the tool(s) {sorted(missing)}")
    return train, val


COMPONENT = '''"""$Title for agentr1: a tool the model calls by name, with JSON arguments, during an episode.

A tool declares ``name`` (what the model calls and what a config lists in ``env.tools``), ``description`` and
``parameters`` (a JSON schema; both are shown to the model) and ``async execute(**arguments)``, which returns text
(or a ``ToolResult`` to pay a per-call reward). An exception, arguments the schema does not allow and a call that
runs past ``timeout`` seconds reach the model as an error observation; the run goes on.
"""

from agentr1_core.tools import BaseTool


class $cls(BaseTool):
    name = "$ident"

    def __init__(self, timeout: float = 5.0) -> None:
        self.timeout = timeout

    # EXAMPLE: replace from here to END EXAMPLE (description, parameters, execute and the helpers after the class)
    # with your tool's own. The example converts a quantity between units of $dimension_words with a table.
    description = "Convert a quantity from one unit to another ($dimension_words)"
    parameters = {
        "type": "object",
        "properties": {
            "value": {"type": "number", "description": "the quantity, e.g. $eg_value"},
            "from_unit": {"type": "string", "description": "its unit, singular or plural, e.g. $eg_from"},
            "to_unit": {"type": "string", "description": "the unit wanted, e.g. $eg_to"},
        },
        "required": ["value", "from_unit", "to_unit"],
    }

    async def execute(self, value, from_unit, to_unit):
        return convert(value, from_unit, to_unit)  # a ValueError reaches the model as an error observation


# One unit's size in its dimension's base unit.
UNITS = $units
PLURALS = $plurals  # plurals that are not name + "s"
SINGULAR = {plural: unit for unit, plural in PLURALS.items()}
_ALL = {unit for table in UNITS.values() for unit in table}


def find_unit(word):
    """``(dimension, size)`` of a unit named in the singular or the plural, any case."""
    key = str(word).strip().lower()
    key = SINGULAR.get(key, key[:-1] if key.endswith("s") and key[:-1] in _ALL else key)
    for dimension, table in UNITS.items():
        if key in table:
            return dimension, table[key]
    raise ValueError(f"unknown unit {word!r}; known: {', '.join(sorted(_ALL))}")


def format_number(number):
    """At most two decimals, without trailing zeros: 7443.216 -> 7443.22, 36.0 -> 36."""
    text = f"{number:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def convert(value, from_unit, to_unit):
    """``value`` ``from_unit`` in ``to_unit``, as text: convert(3, "feet", "inches") == "36"."""
    source, size = find_unit(from_unit)
    target, target_size = find_unit(to_unit)
    if source != target:
        raise ValueError(f"cannot convert {source} ({from_unit}) to {target} ({to_unit})")
    return format_number(float(value) * size / target_size)
# END EXAMPLE
'''

CONFIG = '''# $Title: SFT on expert episodes, then GRPO (minutes on a 2-core CPU)
# SmolLM2-135M-Instruct learns to call $tools_called, then to reply <answer>...</answer>,
# which answer_match compares with each row's reward_model.ground_truth. The rows ship in this package (data/).
seed: 0
run_dir: runs/$name
stages: [sft, rl]
model: {path: smollm2-135m-instruct, dtype: float32, device: auto}
engine: {name: transformers, max_batch_size: 64}
env:
  name: tool_env
  tools: [$tool_list]
  tool_format: hermes
  # EXAMPLE: replace the system prompt with your task's: what the model is asked, how to use the tool, the answer
  system_prompt: >-
$system_prompt
  # END EXAMPLE
  max_turns: 3
agent_flow: {name: agent_env_loop}
reward: {name: answer_match}
algorithm: {name: grpo}
data:
  train: {name: jsonl, path: "$${package_data:$package,data/train.jsonl}"}
  val: {name: jsonl, path: "$${package_data:$package,data/val.jsonl}"}
rollout: {batch_size: 4, n: 4, temperature: 0.7, max_new_tokens: 64, max_turns: 3, max_prompt_tokens: $max_prompt_tokens}
validation: {every: 0, before: true, max_rows: 32, n: 1, temperature: 0.0}
sft: {rows: 32, epochs: 1, lr: 1.0e-4, batch_size: 8}
trainer: {name: local, total_steps: 6, lr: 2.0e-5, micro_batch_size: 8, micro_batch_tokens: 2048, max_grad_norm: 1.0,
          train_layers: 10}
'''

TESTS = '''"""The $ident tool: its contract, and the calls of it in the expert's turns of the rows."""

import json
import re

from agentr1_core.testing import check_tool, run_async
from agentr1_core.tools import call_tool

from $package.$module import $cls

CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)  # the hermes format of the config (env.tool_format)


def expert_calls(row):
    """The arguments of each call of this tool in the row's ``expert_actions``."""
    calls = [json.loads(found) for action in row.get("expert_actions", []) for found in CALL.findall(action)]
    return [call["arguments"] for call in calls if call["name"] == "$ident"]


def test_the_config_gives_the_model_this_tool(config):
    assert "$ident" in [t if isinstance(t, str) else t["name"] for t in config.env.tools]


def test_tool_contract_on_an_experts_call(load_rows):
    arguments = next(call for row in load_rows("val") for call in expert_calls(row))
    result = check_tool($cls(), arguments)  # the schema, errors for bad arguments, and this call succeeding
    assert result.text.strip()


def test_every_expert_call_in_the_rows_succeeds(load_rows):
    for row in load_rows("train") + load_rows("val"):
        for arguments in expert_calls(row):
            result = run_async(call_tool($cls(), arguments))
            assert result.error is None, (row["prompt"], arguments, result.text)


def test_the_expert_episode_calls_the_tool_and_an_answer_without_it_fails(load_rows, expert_episode):
    row = next(r for r in load_rows("val") if expert_calls(r))
    traj = expert_episode(row)
    assert sum(step.info.get("tool_calls", 0) for step in traj.steps) == len(expert_calls(row))
    assert not any(step.info.get("tool_errors") for step in traj.steps) and traj.success()
    without_tool = dict(row, expert_actions=["<answer>an answer without the tool</answer>"])
    assert expert_episode(without_tool).final_reward == 0.0


# EXAMPLE: replace from here to END EXAMPLE with tests of your tool's own work (these check the example's unit
# conversions, its errors, and that the answer of each row that calls it is what it returns for the expert's call).
def converted(value, from_unit, to_unit):
    return run_async(call_tool($cls(), {"value": value, "from_unit": from_unit, "to_unit": to_unit}))


def test_conversions():
    for value, source, target, expected in [
$cases
    ]:
        assert converted(value, source, target).text == expected, (value, source, target)


def test_a_bad_unit_is_an_error_result_for_the_model():
$bad_unit_checks


def test_each_answer_is_the_tools_result_for_the_experts_call(load_rows):
    rows = [row for row in load_rows("train") + load_rows("val") if expert_calls(row)]
    assert rows, "no row calls the $ident tool"
    for row in rows:
        (arguments,) = expert_calls(row)
        truth = row["reward_model"]["ground_truth"]
        assert converted(**arguments).text == truth
        assert row["expert_actions"][1] == f"<answer>{truth}</answer>"
        assert str(arguments["value"]) in row["prompt"]
# END EXAMPLE
'''

EXAMPLE_ONE = '''`$package/tool.py` converts a quantity between units of length, mass or volume with a lookup table
(`convert(37, "furlongs", "meters") == "7443.22"`); an unknown unit or a length-to-mass request raises, which the
model sees as an error observation. Each row is a question such as "How many meters are in 37 furlongs?";
its `expert_actions` are one hermes tool call (on one line in the rows) and the answer:
'''

EXAMPLE_SEVERAL = '''Each tool converts a quantity between units of its own kinds with a lookup table
($tool_dimensions): `convert(37, "furlongs", "meters") == "7443.22"` in `$package/$first_module.py`. An unknown unit
raises, which the model sees as an error observation. Each row is a question such as "How many meters are in 37
furlongs?", which needs one of the tools; its `expert_actions` are one hermes call of that tool (on one line in the
rows) and the answer:
'''

EXAMPLE = '''$example_tools
    <tool_call>{"name": "$first_tool",
                "arguments": {"value": 37, "from_unit": "furlongs", "to_unit": "meters"}}</tool_call>
    <answer>7443.22</answer>

The reward is `answer_match`: 1 when the last turn's `<answer>` equals `reward_model.ground_truth`.
'''


def _example_fields(fields: dict[str, Any]) -> dict[str, str]:
    """What the README's section on the example says of the tools."""
    tools = fields["components"]
    per_tool = [f"`{t['module']}.py` ({words(dims)})" for t, dims in zip(tools, dimensions(len(tools)))]
    own = {"tool_dimensions": words(per_tool), "first_tool": tools[0]["ident"], "first_module": tools[0]["module"]}
    text = fill(EXAMPLE_ONE if len(tools) == 1 else EXAMPLE_SEVERAL, {**fields, **own})
    own["example_tools"] = text if len(tools) == 1 else textwrap.fill(" ".join(text.split()), width=116) + "\n"
    return own


def _component_fields(fields: dict[str, Any], tool: dict[str, Any]) -> dict[str, Any]:
    own = _tool_fields(tool)
    value, source, target, _ = CASES[own["dimensions"][0]][-1]
    return {**own, "eg_value": str(value), "eg_from": source, "eg_to": target}


KIND = Kind(kind="tool", component=COMPONENT, config=CONFIG, tests=TESTS, example=EXAMPLE, rows=rows,
            extra_fields=lambda fields: {**_package_fields(fields), **_example_fields(fields)},
            component_fields=_component_fields)
