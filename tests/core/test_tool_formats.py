"""The hermes tool-call format: well-formed calls parse, malformed ones become errors (never exceptions)."""

from agentr1_core.tool_formats import HermesFormat

fmt = HermesFormat()


def test_parses_calls_and_content():
    turn = fmt.parse('Let me compute.\n<tool_call>{"name": "calculator", "arguments": {"expression": "2*3"}}'
                     '</tool_call>\n<tool_call>{"name": "search", "arguments": "{\\"query\\": \\"x\\"}"}</tool_call>')
    assert turn.content == "Let me compute."
    assert [(c.name, c.arguments, c.error) for c in turn.calls] == [
        ("calculator", {"expression": "2*3"}, None), ("search", {"query": "x"}, None)]


def test_no_call_is_a_final_answer():
    turn = fmt.parse("<answer>42</answer>")
    assert turn.calls == [] and turn.content == "<answer>42</answer>"


def test_malformed_calls_become_errors():
    bad_json = fmt.parse("<tool_call>{name: calculator}</tool_call>").calls[0]
    assert bad_json.error.startswith("tool call is not valid JSON")
    not_object = fmt.parse("<tool_call>[1, 2]</tool_call>").calls[0]
    assert "must be" in not_object.error
    unterminated = fmt.parse('<tool_call>{"name": "calculator"').calls[0]
    assert unterminated.error.startswith("unterminated")
    bad_args = fmt.parse('<tool_call>{"name": "c", "arguments": "not json"}</tool_call>').calls[0]
    assert bad_args.error == "arguments must be a JSON object"
    deep = fmt.parse("<tool_call>" + "[" * 100_000 + "]" * 100_000 + "</tool_call>").calls[0]
    assert deep.error == "tool call is not valid JSON (nested too deeply)" and len(deep.raw) <= 200


def test_result_message_wraps_tool_response():
    call = fmt.parse('<tool_call>{"name": "calculator", "arguments": {}}</tool_call>').calls[0]
    msg = fmt.result_message(call, "42")
    assert msg == {"role": "tool", "name": "calculator", "content": "<tool_response>\n42\n</tool_response>"}
