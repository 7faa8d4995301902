"""The families of generated shell tasks: each is a function of a seeded ``random.Random`` giving one ``Instance``.

An instance is small on purpose (files of a few to ~30 lines, a one- or two-sentence instruction naming the exact
files, a reference solution of one to three one-line bash commands) so that a small model's prompt stays short and
the solution is the kind of command it can learn. ``check`` is Python run by the task's ``tests/test.sh`` in the
working folder: it exits 1 with a message when the result is wrong. Every value the check expects is computed here,
with the same semantics as the reference command (``grep -c`` counts lines holding a substring, ``sort`` of
lowercase ASCII words agrees with Python's order in every locale).

``TRAIN_FAMILIES`` are seen in training; ``HELD_OUT_FAMILIES`` appear only in the validation split.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

WORDS = ("apple", "river", "stone", "cloud", "tiger", "lemon", "piano", "forest", "candle", "rocket", "garden",
         "silver", "window", "planet", "bridge", "pepper", "mirror", "island", "castle", "jacket", "orange", "violet",
         "marble", "winter", "summer", "copper", "falcon", "harbor", "meadow", "pillow", "saddle", "thunder",
         "walnut", "zebra", "banjo", "cactus", "dragon", "ember", "fossil", "glacier", "hammer", "igloo", "jungle",
         "kettle", "ladder", "magnet", "nectar", "oyster", "parrot", "quartz", "raven", "spider", "tulip", "velvet")
NAMES = ("alice", "bruno", "carla", "dmitri", "elena", "farid", "greta", "hiro", "ines", "jonas", "kira", "liam",
         "maya", "nadia", "oscar", "priya", "quinn", "rosa", "samir", "tomas", "ursula", "victor", "wanda", "xavier",
         "yara", "zane", "amara", "boris", "chloe", "diego", "esme", "felix", "gita", "hugo", "ivan", "julia")
LEVELS = ("INFO", "WARN", "ERROR", "DEBUG")
REGIONS = ("north", "south", "east", "west", "central")
CITIES = ("paris", "lima", "oslo", "cairo", "tokyo", "quito", "dublin", "austin", "perth", "porto")
TEAMS = ("sales", "support", "design", "research", "finance", "legal")


@dataclass(frozen=True)
class Instance:
    """One task: ``files`` (path under /app -> text), ``instruction``, ``solution`` (bash commands, one line each),
    ``check`` (Python the test runs in the working folder)."""

    family: str
    files: dict[str, str]
    instruction: str
    solution: tuple[str, ...]
    check: str
    difficulty: str = "easy"

    def key(self) -> tuple:
        return self.family, self.instruction, tuple(sorted(self.files.items()))


def _lines(rng: random.Random, n: int, low: int = 1, high: int = 4, pool=WORDS) -> list[str]:
    return [" ".join(rng.choice(pool) for _ in range(rng.randint(low, high))) for _ in range(n)]


def _text(lines: list[str]) -> str:
    return "".join(f"{line}\n" for line in lines)


def _expect_answer(name: str, expected, got: str = "") -> str:
    """Check code: the file ``name`` (stripped; ``got`` an expression of it, else ``answer(name)``) is ``expected``."""
    got = got or f"answer({name!r})"
    return (f"expected = {expected!r}\ngot = {got}\nif got != expected:\n"
            f'    fail(f"{name} holds {{got!r}}, expected {{expected!r}}")\n')


def count(rng: random.Random) -> Instance:
    kind = rng.choice(("lines", "words", "files"))
    if kind == "files":
        folder, ext = rng.choice((("logs", "log"), ("docs", "md"), ("reports", "csv"), ("images", "png")))
        n = rng.randint(3, 12)
        names = rng.sample(WORDS, n + 3)
        files = {f"{folder}/{name}{i}.{ext}": f"{rng.choice(WORDS)}\n" for i, name in enumerate(names[:n])}
        for name in names[n:n + rng.randint(1, 3)]:
            files[f"{folder}/{name}.txt"] = f"{rng.choice(WORDS)}\n"
        return Instance("count", files, f"Count the .{ext} files in the {folder} folder and write the number to "
                        "answer.txt.", (f"ls {folder}/*.{ext} | wc -l > answer.txt",),
                        _expect_answer("answer.txt", str(n)))
    name = rng.choice(("data.txt", "notes.txt", "list.txt", "items.txt", "poem.txt", "words.txt"))
    lines = _lines(rng, rng.randint(4, 25) if kind == "lines" else rng.randint(3, 10), 1, 5)
    value = len(lines) if kind == "lines" else sum(len(line.split()) for line in lines)
    flag = "-l" if kind == "lines" else "-w"
    return Instance("count", {name: _text(lines)}, f"Count the {kind} in {name} and write the number to answer.txt.",
                    (f"wc {flag} < {name} > answer.txt",), _expect_answer("answer.txt", str(value)))


def find(rng: random.Random) -> Instance:
    target = rng.choice(WORDS + NAMES)
    pool = tuple(w for w in WORDS if target not in w and w not in target)
    ext = rng.choice(("txt", "log", "md"))
    names = [f"{w}.{ext}" for w in rng.sample(pool, rng.randint(3, 6))]
    files = {name: _text(_lines(rng, rng.randint(2, 6), 1, 5, pool)) for name in names}
    chosen = rng.choice(names)
    lines = files[chosen].splitlines()
    where = rng.randrange(len(lines))
    words = lines[where].split()
    words.insert(rng.randint(0, len(words)), target)
    lines[where] = " ".join(words)
    files[chosen] = _text(lines)
    check = _expect_answer("answer.txt", chosen, "answer('answer.txt').removeprefix('./')")
    return Instance("find", files, f"Exactly one of the .{ext} files in this folder contains the word {target}. "
                    "Write that file's name to answer.txt.", (f"grep -lw {target} *.{ext} > answer.txt",), check)


def sort(rng: random.Random) -> Instance:
    kind = rng.choice(("alpha", "numeric", "reverse", "unique"))
    out = rng.choice(("sorted.txt", "result.txt", "output.txt"))
    if kind == "numeric":
        name, values = "numbers.txt", [str(v) for v in rng.sample(range(1, 1000), rng.randint(5, 20))]
        expected, how, flag = sorted(values, key=int), "from smallest to largest number", "-n "
    else:
        name = rng.choice(("names.txt", "words.txt", "list.txt"))
        pool = NAMES if name == "names.txt" else WORDS
        values = rng.sample(pool, rng.randint(5, 20))
        if kind == "unique":
            values += rng.sample(values, rng.randint(2, 5))
            rng.shuffle(values)
        expected = sorted(set(values), reverse=kind == "reverse")
        how, flag = {"alpha": ("alphabetically", ""), "reverse": ("in reverse alphabetical order", "-r "),
                     "unique": ("alphabetically, keeping each line once", "-u ")}[kind]
    while values == expected:
        rng.shuffle(values)
    check = _expect_answer(out, expected, f"answer({out!r}).splitlines()")
    return Instance("sort", {name: _text(values)}, f"Sort the lines of {name} {how} and write them to {out}.",
                    (f"sort {flag}{name} > {out}",), check)


def grep(rng: random.Random) -> Instance:
    kind = rng.choice(("level", "not_level", "word"))
    if kind == "word":
        name, target = rng.choice(("story.txt", "notes.txt", "journal.txt")), rng.choice(WORDS)
        pool = tuple(w for w in WORDS if target not in w)
        lines = _lines(rng, rng.randint(6, 20), 2, 6, pool)
        for i in rng.sample(range(len(lines)), rng.randint(1, len(lines) - 1)):
            words = lines[i].split()
            words.insert(rng.randint(0, len(words)), target)
            lines[i] = " ".join(words)
        value, sentence = sum(target in line for line in lines), f"contain the word {target}"
        command = f"grep -c {target} {name} > answer.txt"
    else:
        name, target = rng.choice(("app.log", "server.log", "events.log")), rng.choice(LEVELS)
        levels = [rng.choice(LEVELS) for _ in range(rng.randint(6, 24))]
        levels[rng.randrange(len(levels))] = target
        levels[rng.randrange(len(levels))] = rng.choice([lv for lv in LEVELS if lv != target])
        lines = [f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:"
                 f"{rng.randint(0, 59):02d} {lv} {' '.join(rng.sample(WORDS, 2))}" for lv in levels]
        hit = sum(target in line for line in lines)
        if kind == "level":
            value, sentence, command = hit, f"contain {target}", f"grep -c {target} {name} > answer.txt"
        else:
            value, sentence = len(lines) - hit, f"do not contain {target}"
            command = f"grep -vc {target} {name} > answer.txt"
    return Instance("grep", {name: _text(lines)}, f"Count the lines of {name} that {sentence} and write the number "
                    "to answer.txt.", (command,), _expect_answer("answer.txt", str(value)))


def csv_sum(rng: random.Random) -> Instance:
    name, text_cols, num_cols, group_pool = rng.choice((
        ("sales.csv", ("region", "product"), ("amount", "units"), REGIONS),
        ("orders.csv", ("city", "item"), ("quantity", "price"), CITIES),
        ("expenses.csv", ("team", "category"), ("cost", "hours"), TEAMS),
        ("scores.csv", ("player", "level"), ("points", "bonus"), NAMES)))
    columns = [text_cols[0], rng.choice(text_cols[1:] + num_cols[1:]), num_cols[0]]
    order = rng.sample(range(3), 3)
    header = [columns[i] for i in order]
    groups = rng.sample(group_pool, 3)
    rows = []
    for _ in range(rng.randint(4, 14)):
        values = {columns[0]: rng.choice(groups), columns[2]: rng.randint(1, 500)}
        values[columns[1]] = rng.choice(WORDS) if columns[1] in text_cols else rng.randint(1, 50)
        rows.append(values)
    field = rng.choice((columns[2],) + ((columns[1],) if columns[1] in num_cols else ()))
    col, key_col = header.index(field) + 1, header.index(columns[0]) + 1
    text = _text([",".join(header)] + [",".join(str(r[h]) for h in header) for r in rows])
    if rng.random() < 0.5:
        total = sum(r[field] for r in rows)
        instruction = f"Add up the {field} column of {name} (the first line is the header) and write the total to " \
                      "answer.txt."
        command = f"awk -F, 'NR>1{{s+=${col}}} END{{print s}}' {name} > answer.txt"
    else:
        group = rng.choice([r[columns[0]] for r in rows])
        total = sum(r[field] for r in rows if r[columns[0]] == group)
        instruction = f"Add up the {field} column of {name} over the rows whose {columns[0]} is {group}, and write " \
                      "the total to answer.txt."
        command = f"awk -F, '${key_col}==\"{group}\"{{s+=${col}}} END{{print s}}' {name} > answer.txt"
    check = (f"got = answer('answer.txt')\ntry:\n    ok = float(got) == {total}\nexcept ValueError:\n    ok = False\n"
             f'if not ok:\n    fail(f"answer.txt holds {{got!r}}, expected {total}")\n')
    return Instance("csv_sum", {name: text}, instruction, (command,), check)


def rename(rng: random.Random) -> Instance:
    old, new = rng.choice((("txt", "md"), ("jpeg", "jpg"), ("htm", "html"), ("yml", "yaml"), ("text", "txt"),
                           ("log", "bak")))
    folder = rng.choice(("", "docs/", "files/", "notes/"))
    names = rng.sample(WORDS, rng.randint(2, 7) + 2)
    moved = {f"{folder}{n}.{old}": f"{rng.choice(WORDS)} {rng.randint(1, 99)}\n" for n in names[2:]}
    kept = {f"{folder}{names[0]}.{rng.choice(('csv', 'py', 'json'))}": "keep me\n"}
    if folder and rng.random() < 0.5:
        kept[f"{names[1]}.{old}"] = "outside the folder\n"
    expected = {f"{p[: -len(old)]}{new}": text for p, text in moved.items()}
    where = f"the {folder[:-1]} folder" if folder else "this folder"
    check = (f"moved, kept = {sorted(moved)!r}, {kept!r}\nexpected = {expected!r}\n"
             "for path, text in expected.items():\n"
             "    if not Path(path).is_file() or Path(path).read_text() != text:\n"
             "        fail(f'{path} is missing or its content changed')\n"
             "for path in moved:\n"
             "    if Path(path).exists():\n"
             "        fail(f'{path} is still there')\n"
             "for path, text in kept.items():\n"
             "    if not Path(path).is_file() or Path(path).read_text() != text:\n"
             "        fail(f'{path} should not change')\n")
    instruction = f"Rename every .{old} file in {where} to end in .{new} instead (report.{old} becomes report.{new}); " \
                  "leave the other files alone."
    command = f'for f in {folder}*.{old}; do mv "$f" "${{f%.{old}}}.{new}"; done'
    return Instance("rename", {**moved, **kept}, instruction, (command,), check)


_BUGS = (  # function name, parameter, docstring, buggy line, fixed line, the function on an argument
    ("total", "n", "the sum of the numbers 1 to n", "    return sum(range(1, n))",
     "    return sum(range(1, n + 1))", lambda n: sum(range(1, n + 1)), lambda rng: rng.randint(3, 40)),
    ("smallest", "values", "the smallest of the values", "    return max(values)", "    return min(values)",
     min, lambda rng: rng.sample(range(1, 100), rng.randint(3, 7))),
    ("count_even", "values", "how many of the values are even", "    return sum(1 for v in values if v % 2 == 1)",
     "    return sum(1 for v in values if v % 2 == 0)", lambda vs: sum(1 for v in vs if v % 2 == 0),
     lambda rng: [rng.randint(1, 60) for _ in range(rng.randint(4, 9))]),
    ("area", "w, h", "the area of a w by h rectangle", "    return w + h", "    return w * h",
     lambda args: args[0] * args[1], lambda rng: (rng.randint(3, 20), rng.randint(3, 20))),
    ("average", "values", "the mean of the values", "    return sum(values) / (len(values) + 1)",
     "    return sum(values) / len(values)", lambda vs: sum(vs) / len(vs),
     lambda rng: [rng.randint(1, 50) for _ in range(rng.randint(2, 6))]),
)


def _sed(buggy: str, fixed: str) -> str:
    pattern = str.maketrans({c: "\\" + c for c in "\\/.*[^$"})
    replacement = str.maketrans({c: "\\" + c for c in "\\/&"})
    return f"s/{buggy.strip().translate(pattern)}/{fixed.strip().translate(replacement)}/"


def fix_bug(rng: random.Random) -> Instance:
    name, params, doc, buggy, fixed, correct, draw = rng.choice(_BUGS)
    wrong = {"total": lambda n: sum(range(1, n)), "smallest": max, "area": lambda a: a[0] + a[1],
             "count_even": lambda vs: sum(1 for v in vs if v % 2 == 1),
             "average": lambda vs: sum(vs) / (len(vs) + 1)}[name]
    arg = draw(rng)
    while correct(arg) == wrong(arg):
        arg = draw(rng)
    call = f"{name}(*{arg!r})" if name == "area" else f"{name}({arg!r})"
    script = rng.choice(("calc.py", "stats.py", "util.py", "mathlib.py", "tool.py"))
    source = f'def {name}({params}):\n    """Return {doc}."""\n{buggy}\n\n\nif __name__ == "__main__":\n' \
             f"    print({call})\n"
    others = [draw(rng) for _ in range(3)]
    cases = [(f"{name}(*{a!r})" if name == "area" else f"{name}({a!r})", correct(a)) for a in others]
    check = ("import importlib.util, subprocess\n"
             f"run = subprocess.run([sys.executable, {script!r}], capture_output=True, text=True, timeout=20)\n"
             f"expected, printed = {str(correct(arg))!r}, run.stdout.strip()\n"
             "if printed != expected:\n"
             f'    fail(f"python3 {script} printed {{printed!r}}, expected {{expected}} {{run.stderr[-300:]}}")\n'
             f"spec = importlib.util.spec_from_file_location('task_module', {script!r})\n"
             "module = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(module)\n"
             f"for call, want in {cases!r}:\n"
             "    got = eval(call, vars(module))\n"
             "    if got != want:\n"
             "        fail(f'{call} returned {got!r}, expected {want!r}')\n")
    instruction = f"{script} has a one-line bug: {name}() should return {doc}. Fix it so that `python3 {script}` " \
                  f"prints {correct(arg)}."
    return Instance("fix_bug", {script: source}, instruction, (f"sed -i '{_sed(buggy, fixed)}' {script}",), check,
                    difficulty="medium")


def head_tail(rng: random.Random) -> Instance:
    name = rng.choice(("log.txt", "history.txt", "queue.txt", "events.txt"))
    lines = [f"{i + 1} {w}" for i, w in enumerate(_lines(rng, rng.randint(8, 25), 1, 3))]
    n = rng.randint(2, min(7, len(lines) - 2))
    first = rng.random() < 0.5
    out, expected = ("top.txt", lines[:n]) if first else ("bottom.txt", lines[-n:])
    check = _expect_answer(out, expected, f"answer({out!r}).splitlines()")
    where = "first" if first else "last"
    return Instance("head_tail", {name: _text(lines)}, f"Write the {where} {n} lines of {name} to {out}.",
                    (f"{'head' if first else 'tail'} -n {n} {name} > {out}",), check)


FAMILIES: dict[str, Callable[[random.Random], Instance]] = {
    "count": count, "find": find, "sort": sort, "grep": grep, "csv_sum": csv_sum, "rename": rename,
    "fix_bug": fix_bug, "head_tail": head_tail}
TRAIN_FAMILIES = ("count", "find", "sort", "grep", "csv_sum", "rename", "fix_bug")
HELD_OUT_FAMILIES = ("head_tail",)
