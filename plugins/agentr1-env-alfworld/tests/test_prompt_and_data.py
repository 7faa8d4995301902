"""The dataset loader, command parsing and the flat context, without running a game."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import agentr1_env_alfworld
from agentr1_core.config import ConfigError
from agentr1_env_alfworld.datasets import TASK_TYPES, load_alfworld
from agentr1_env_alfworld.prompt import parse_command, render_user_message, split_intro

DATA = Path(agentr1_env_alfworld.__file__).parent / "data" / "alfworld_sample"  # shipped in the wheel


def test_loader_reads_every_shipped_game_with_its_task_type_and_goal(rows):
    assert len(rows) == 6
    assert sorted(r["data_source"] for r in rows) == sorted(TASK_TYPES)
    for row in rows:
        assert Path(row["gamefile"]).is_file() and row["env_kwargs"]["gamefile"] == row["gamefile"]
        assert row["extra_info"]["task_dir"].startswith(row["data_source"] + "-")
    goals = {r["data_source"]: r["prompt"] for r in rows}
    assert goals["look_at_obj_in_light"] == "examine the bowl with the desklamp."
    assert goals["pick_two_obj_and_place"] == "find two soapbar and put them in garbagecan."


def test_loader_accepts_the_data_root_the_split_folder_or_a_task_folder(tmp_path):
    split = DATA / "json_2.1.1" / "valid_seen"
    assert len(load_alfworld(str(split))) == 6
    one = next(split.iterdir())
    shutil.copytree(one, tmp_path / one.name)
    only = load_alfworld(str(tmp_path))
    assert len(only) == 1 and only[0]["extra_info"]["task_dir"] == one.name


def test_loader_filters_limits_and_shuffles_reproducibly():
    picked = load_alfworld(str(DATA), task_types=["pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep"])
    assert {r["data_source"] for r in picked} == {"pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep"}
    assert len(load_alfworld(str(DATA), limit=2)) == 2
    a = [r["gamefile"] for r in load_alfworld(str(DATA), shuffle=True, seed=3)]
    b = [r["gamefile"] for r in load_alfworld(str(DATA), shuffle=True, seed=3)]
    assert a == b and sorted(a) == [r["gamefile"] for r in load_alfworld(str(DATA))]


def test_loader_errors_are_clear(tmp_path, monkeypatch):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    with pytest.raises(ConfigError, match="needs a path"):
        load_alfworld("")
    with pytest.raises(ConfigError, match="not found"):
        load_alfworld(str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="no game.tw-pddl"):
        load_alfworld(str(tmp_path))
    with pytest.raises(ConfigError, match="unknown"):
        load_alfworld(str(DATA), task_types=["pick_banana"])
    monkeypatch.setenv("ALFWORLD_DATA", str(DATA))
    assert len(load_alfworld("")) == 6


@pytest.mark.parametrize("reply, command", [
    ("go to desk 1", "go to desk 1"),
    ("  Go to Desk 1.\nI will then look around.", "go to desk 1"),
    ("> take bowl 1 from desk 1", "take bowl 1 from desk 1"),
    ("Action: use desklamp 1", "use desklamp 1"),
    ("`open drawer 2`", "open drawer 2"),
    ("", ""),
])
def test_parse_command(reply, command):
    assert parse_command(reply) == command


def test_intro_is_split_into_task_and_room():
    intro = ("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. You see a desk 1.\n\n"
             "Your task is to: examine the bowl with the desklamp.")
    task, room = split_intro(intro)
    assert task == "examine the bowl with the desklamp."
    assert room == "You are in the middle of a room. You see a desk 1."


def test_context_keeps_only_the_history_it_is_given():
    history = [(f"go to drawer {i}", f"You arrive at drawer {i}.") for i in range(1, 4)]
    text = render_user_message("find a pen.", "A room.", history[-2:], ["look", "inventory"], 3, 50)
    assert "go to drawer 1" not in text and "go to drawer 2" in text and "go to drawer 3" in text
    assert "Step 4 of 50" in text and text.endswith("Reply with one command.")


def test_installed_cli_lists_the_plugin():
    exe = Path(sys.executable).with_name("agentr1-core")
    out = subprocess.run([str(exe), "plugins", "--json"], capture_output=True, text=True, check=True).stdout
    listing = json.loads(out)
    entries = listing if isinstance(listing, list) else listing.get("plugins", [])
    mine = [p for p in entries if p.get("distribution") == "agentr1-env-alfworld"]
    assert mine and mine[0]["status"] == "ok", out
    assert mine[0]["components"] == {
        "command": ["alfworld"], "config": ["alfworld", "alfworld-cpu", "alfworld-gpu"],
        "dataset": ["alfworld", "alfworld_split"], "env": ["alfworld"],
        "reward": ["alfworld_progress", "alfworld_won"]}


def test_a_split_name_typo_is_refused_instead_of_loading_every_split():
    with pytest.raises(ConfigError, match=r"data.split: unknown alfworld split 'valid_unseeen' \(did you mean "
                                          r"'valid_unseen'\?\)"):
        load_alfworld(str(DATA), split="valid_unseeen")


def test_a_folder_holding_only_another_split_is_not_loaded_under_the_wrong_label(tmp_path):
    with pytest.raises(ConfigError, match=r"no 'valid_unseen' split under .*; it holds: valid_seen"):
        load_alfworld(str(DATA), split="valid_unseen")
    with pytest.raises(ConfigError, match=r"is the 'valid_seen' split, not 'train'"):
        load_alfworld(str(DATA / "json_2.1.1" / "valid_seen"), split="train")
    shutil.copytree(DATA / "json_2.1.1" / "valid_seen", tmp_path / "valid_seen")  # a folder of splits
    with pytest.raises(ConfigError, match=r"no 'train' split under"):
        load_alfworld(str(tmp_path), split="train")
    assert {r["extra_info"]["split"] for r in load_alfworld(str(tmp_path), split="valid_seen")} == {"valid_seen"}
