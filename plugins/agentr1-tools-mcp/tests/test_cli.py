"""The installed distribution through the real ``agentr1-core`` console script: ``plugins`` lists it, ``mcp list``
prints each server's tools and schemas without loading a model, and a run whose MCP servers or references are wrong
stops before the model loads with every problem at once, one line each, exit code 2."""

from __future__ import annotations

import json
import os
import uuid


CALCULATOR_SCHEMA = {"type": "object", "properties": {"expression": {"type": "string",
                                                                    "description": "for example (12 + 3) * 4"}},
                     "required": ["expression"]}


def test_plugins_lists_the_distribution_and_its_components(run_cli):
    out = run_cli("plugins", "--json")
    assert out.returncode == 0, out.stderr
    row = {r["plugin"]: r for r in json.loads(out.stdout)["plugins"]}["mcp"]
    assert row["distribution"] == "agentr1-tools-mcp" and row["status"] == "ok"
    assert row["components"] == {"command": ["mcp"], "config": ["calculator-mcp", "time-mcp"],
                                 "dataset": ["time_conversions"], "tool_source": ["mcp"]}


def test_mcp_list_prints_the_tools_and_schemas_of_every_server(run_cli, toolbox):
    out = run_cli("mcp", "list", "calculator-mcp", f"mcp.servers.box={{command: python, args: [{toolbox.path}, --only, "
                                                   f"echo], rename: {{echo: say}}}}")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "calc (stdio: python -m agentr1_tools_mcp.examples.calculator_server): 1 tool(s)",
        "  calculator [env.tools]: Evaluate an arithmetic expression with + - * / // % ** and parentheses.",
        f"    {json.dumps(CALCULATOR_SCHEMA)}",
        f"box (stdio: python {toolbox.path} --only echo): 1 tool(s)",
        "  say: Say the text back.",
        '    {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}']
    as_json = run_cli("mcp", "list", "calculator-mcp", "--json")
    assert json.loads(as_json.stdout) == {"calc": [{"type": "function", "function": {
        "name": "calculator", "description": "Evaluate an arithmetic expression with + - * / // % ** and parentheses.",
        "parameters": CALCULATOR_SCHEMA}}]}
    assert "Loading weights" not in out.stderr + as_json.stderr  # no model


def test_a_run_reports_every_problem_of_its_servers_and_references_at_once(run_cli, toolbox, processes):
    tag = uuid.uuid4().hex
    env = f"env: {{AGENTR1_MCP_TEST_TAG: {tag}}}"
    overrides = [
        "env.tools=[mcp:calc, mcp:dead]", "rollout.n=0",
        f"mcp.servers.dead={{command: python, args: [{toolbox.path}, --fail-start], {env}}}",
        "mcp.servers.absent={command: no-such-mcp-server, args: [--port, '1']}",
        f"mcp.servers.empty={{command: python, args: [{toolbox.path}, --no-tools], {env}}}",
        "mcp.servers.gone={url: 'http://127.0.0.1:9/mcp', timeout: 5}",
        f"mcp.servers.renamed={{command: python, args: [{toolbox.path}], rename: {{ecko: say}}, {env}}}",
        "mcp.servers.typo={command: python, argz: [-m, x]}",
    ]
    out = run_cli("run", "calculator-mcp", "run_dir=/nonexistent/never-written", *overrides)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    prefix = "agentr1-core: error: config error at "
    expected = {
        "rollout.n": "rollout.n: must be >= 1",
        "dead": f"mcp.servers.dead: the stdio server did not start: it exited before it answered; command: python "
                f"{toolbox.path} --fail-start; its stderr: toolbox: cannot open the database",
        "absent": "mcp.servers.absent: the stdio server did not start: it exited before it answered; command: "
                  "no-such-mcp-server --port 1; its stderr: command not found: no-such-mcp-server",
        "empty": f"mcp.servers.empty: the server lists no tools (python {toolbox.path} --no-tools)",
        "gone": "mcp.servers.gone: the streamable HTTP server did not answer: ConnectError: All connection attempts "
                "failed; url: http://127.0.0.1:9/mcp",
        "renamed": "mcp.servers.renamed.rename: the server has no tool 'ecko' (did you mean 'echo'?); its tools: "
                   "echo, shout, slow, fail, picture, document, crash, whoami, meet",
        "typo": "mcp.servers.typo.argz: unknown key (did you mean 'args'?); valid: command, args, env, cwd, timeout, "
                "start_timeout, rename",
    }
    for what, line in expected.items():
        assert sum(ln.startswith(prefix + line) for ln in lines) == 1, (what, lines)
    assert len(lines) == len(expected), lines
    assert not os.path.exists("/nonexistent/never-written")
    assert processes.tagged(tag) == []  # the checks stopped every server they started


def test_an_unknown_server_or_tool_in_env_tools_is_named_with_a_close_match(run_cli):
    out = run_cli("run", "calculator-mcp", "run_dir=/nonexistent/never-written", "env.tools=[mcp:calc/calculater]")
    assert out.returncode == 2
    assert out.stderr.strip() == ("agentr1-core: error: config error at mcp.servers.calc: env.tools names "
                                  "mcp:calc/calculater, but the server has no tool 'calculater' (did you mean "
                                  "'calculator'?); its tools: calculator")
    out = run_cli("run", "calculator-mcp", "run_dir=/nonexistent/never-written", "env.tools=[mcp:calk]")
    assert out.returncode == 2
    assert out.stderr.strip() == ("agentr1-core: error: config error at mcp.servers: env.tools names mcp:calk, but "
                                  "no server 'calk' is configured (did you mean 'calc'?); servers: calc")
