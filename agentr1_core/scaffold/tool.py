"""The ``tool`` kind: a tool in the user's words, with a unit-conversion example, and questions whose answer needs it.

The example is a tool a small model cannot replace with its own guess: it converts 37 furlongs to meters with a
lookup table, and the model learns to call it with the value and the two units copied from the question, then to
copy the result into ``<answer>...</answer>`` (``answer_match``). The rows' ground truths are computed by the
generated tool module itself (its source is executed here), so the data and the tool cannot disagree.
"""

from __future__ import annotations

import json
import random
from typing import Any

from agentr1_core.scaffold.common import Kind, Rows, fill

# One unit's size in its dimension's base unit (meter, gram, liter), and plurals that are not name + "s".
UNITS: dict[str, dict[str, float]] = {
    "length": {"meter": 1.0, "kilometer": 1000.0, "centimeter": 0.01, "inch": 0.0254, "foot": 0.3048,
               "yard": 0.9144, "mile": 1609.344, "furlong": 201.168},
    "mass": {"gram": 1.0, "kilogram": 1000.0, "ounce": 28.349523125, "pound": 453.59237, "stone": 6350.29318},
    "volume": {"liter": 1.0, "milliliter": 0.001, "cup": 0.2365882365, "pint": 0.473176473,
               "gallon": 3.785411784},
}
PLURALS = {"inch": "inches", "foot": "feet"}


def _table(value: dict[str, dict[str, float]]) -> str:
    """The units table as Python source, one unit a line."""
    lines = ["{"]
    for dimension, units in value.items():
        lines.append(f"    {json.dumps(dimension)}: {{")
        lines += [f"        {json.dumps(unit)}: {size!r}," for unit, size in units.items()]
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines)


def _extra(fields: dict[str, str]) -> dict[str, str]:
    return {"units": _table(UNITS), "plurals": json.dumps(PLURALS)}


def _plural(unit: str) -> str:
    return PLURALS.get(unit, unit + "s")


QUESTIONS = ("How many {to} are in {value} {frm}?", "Convert {value} {frm} to {to}.")


def rows(fields: dict[str, str]) -> tuple[Rows, Rows]:
    """200 training and 32 held-out questions (disjoint), each answered by one call of the tool."""
    namespace: dict[str, Any] = {}
    exec(compile(fill(COMPONENT, fields), "<generated tool>", "exec"), namespace)  # the generated module's code
    convert = namespace["convert"]
    rng = random.Random(0)
    seen: set[str] = set()
    out: Rows = []
    while len(out) < 232:
        dimension = rng.choice(sorted(UNITS))
        frm, to = rng.sample(sorted(UNITS[dimension]), 2)
        value = rng.randint(2, 99)
        answer = convert(value, frm, to)
        if not 0.1 <= float(answer) < 1e6:
            continue
        question = rng.choice(QUESTIONS).format(value=value, frm=_plural(frm), to=_plural(to))
        if question in seen:
            continue
        seen.add(question)
        call = {"name": fields["ident"], "arguments": {"value": value, "from_unit": _plural(frm),
                                                       "to_unit": _plural(to)}}
        out.append({
            "prompt": question,
            "data_source": f"{fields['ident']}_{dimension}",
            "reward_model": {"ground_truth": answer},
            "expert_actions": [f"<tool_call>{json.dumps(call)}</tool_call>", f"<answer>{answer}</answer>"],
            "extra_info": {"index": len(out)},
        })
    return out[:200], out[200:]


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
    # with your tool's own. The example converts a quantity between units of length, mass or volume with a table.
    description = "Convert a quantity from one unit to another (length, mass or volume)"
    parameters = {
        "type": "object",
        "properties": {
            "value": {"type": "number", "description": "the quantity, e.g. 37"},
            "from_unit": {"type": "string", "description": "its unit, singular or plural, e.g. furlongs"},
            "to_unit": {"type": "string", "description": "the unit wanted, e.g. meters"},
        },
        "required": ["value", "from_unit", "to_unit"],
    }

    async def execute(self, value, from_unit, to_unit):
        return convert(value, from_unit, to_unit)  # a ValueError reaches the model as an error observation


# One unit's size in its dimension's base unit (meter, gram, liter).
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
# SmolLM2-135M-Instruct learns to call the $ident tool, then to reply <answer>...</answer>, which answer_match
# compares with each row's reward_model.ground_truth. The rows ship in this package (data/).
seed: 0
run_dir: runs/$name
stages: [sft, rl]
model: {path: smollm2-135m-instruct, dtype: float32, device: auto}
engine: {name: transformers, max_batch_size: 64}
env:
  name: tool_env
  tools: [$ident]
  tool_format: hermes
  # EXAMPLE: replace the system prompt with your task's: what the model is asked, how to use the tool, the answer
  system_prompt: >-
    Answer the user's unit conversion question. First call the $ident tool with the value and the two units,
    then reply with only the result as <answer>NUMBER</answer>.
  # END EXAMPLE
  max_turns: 3
agent_flow: {name: agent_env_loop}
reward: {name: answer_match}
algorithm: {name: grpo}
data:
  train: {name: jsonl, path: "$${package_data:$package,data/train.jsonl}"}
  val: {name: jsonl, path: "$${package_data:$package,data/val.jsonl}"}
rollout: {batch_size: 4, n: 4, temperature: 0.7, max_new_tokens: 64, max_turns: 3, max_prompt_tokens: 1024}
validation: {every: 0, before: true, max_rows: 32, n: 1, temperature: 0.0}
sft: {rows: 32, epochs: 1, lr: 1.0e-4, batch_size: 8}
trainer: {name: local, total_steps: 6, lr: 2.0e-5, micro_batch_size: 8, micro_batch_tokens: 2048, max_grad_norm: 1.0,
          train_layers: 10}
'''

TESTS = '''"""The $ident tool: its contract, and the calls of it in the expert's turns of every row."""

import json
import re

from agentr1_core.testing import check_tool, run_async
from agentr1_core.tools import call_tool

from $package.tool import $cls

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
# conversions, its errors, and that each row's answer is what the tool returns for the expert's call).
def converted(value, from_unit, to_unit):
    return run_async(call_tool($cls(), {"value": value, "from_unit": from_unit, "to_unit": to_unit}))


def test_conversions():
    for value, source, target, expected in [
        (1, "mile", "meter", "1609.34"), (3, "feet", "inches", "36"), (2, "Pounds", "ounces", "32"),
        (5, "liters", "milliliter", "5000"), (10, "centimeters", "inches", "3.94"),
        (37, "furlongs", "meters", "7443.22"),
    ]:
        assert converted(value, source, target).text == expected, (value, source, target)


def test_a_bad_unit_is_an_error_result_for_the_model():
    unknown = converted(1, "parsec", "meter")
    assert unknown.error == "exception" and "unknown unit" in unknown.text
    mixed = converted(1, "meter", "gram")
    assert mixed.error == "exception" and "cannot convert" in mixed.text


def test_each_answer_is_the_tools_result_for_the_experts_call(load_rows):
    for row in load_rows("train") + load_rows("val"):
        (arguments,) = expert_calls(row)
        truth = row["reward_model"]["ground_truth"]
        assert converted(**arguments).text == truth
        assert row["expert_actions"][1] == f"<answer>{truth}</answer>"
        assert str(arguments["value"]) in row["prompt"]
# END EXAMPLE
'''

EXAMPLE = '''`$package/tool.py` converts a quantity between units of length, mass or volume with a lookup table
(`convert(37, "furlongs", "meters") == "7443.22"`); an unknown unit or a length-to-mass request raises, which the
model sees as an error observation. Each row is a question such as "How many meters are in 37 furlongs?";
its `expert_actions` are one hermes tool call (on one line in the rows) and the answer:

    <tool_call>{"name": "$ident",
                "arguments": {"value": 37, "from_unit": "furlongs", "to_unit": "meters"}}</tool_call>
    <answer>7443.22</answer>

The reward is `answer_match`: 1 when the last turn's `<answer>` equals `reward_model.ground_truth`.
'''

KIND = Kind(kind="tool", component=COMPONENT, config=CONFIG, tests=TESTS, example=EXAMPLE, rows=rows,
            extra_fields=_extra)
