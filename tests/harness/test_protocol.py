from hypothesis import given, settings
from hypothesis import strategies as st

from cheetah.core.wire import ParamSpec, ToolResult, ToolSpec
from cheetah.harness.protocol import parse_message, render_call, render_result, render_tool_specs

_FIRST = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_"
names = st.builds(
    str.__add__, st.sampled_from(_FIRST), st.text(alphabet=_FIRST + "0123456789-", max_size=11)
)
# Arbitrary unicode, biased towards the characters that break naive XML handling.
tricky = st.sampled_from(
    [
        "<",
        ">",
        "&",
        "]]>",
        "</",
        "</tool>",
        '<tool name="x">',
        "</content>",
        "<![CDATA[",
        "\n",
        '"',
        "'",
        "é",
        "🐍",
        "\x00",
        "\r\n",
    ]
)
bodies = st.lists(st.one_of(st.text(), tricky), max_size=12).map("".join)
prose = st.text().filter(lambda t: "<tool" not in t)


@given(name=names, args=st.dictionaries(names, bodies, max_size=5))
def test_render_then_parse_round_trips(name, args):
    [call] = parse_message(render_call(name, args))
    assert call.error is None
    assert call.name == name
    assert call.args == args


@settings(max_examples=50)
@given(
    calls=st.lists(st.tuples(names, st.dictionaries(names, bodies, max_size=3)), max_size=4),
    before=prose,
    between=prose,
)
def test_several_calls_with_prose_round_trip(calls, before, between):
    text = before + between.join(render_call(n, a) for n, a in calls) + between
    parsed = parse_message(text)
    assert [(c.name, c.args, c.error) for c in parsed] == [(n, a, None) for n, a in calls]
    assert [c.index for c in parsed] == list(range(1, len(calls) + 1))


def test_code_survives_unescaped():
    code = 'if a < b && c > d:\n    s = "]]>" + "<div>&amp;</div>"\n'
    text = f'Fixing it.\n<tool name="edit_file"><path>x.py</path><new_str>{code}</new_str></tool>\nDone?'
    [call] = parse_message(text)
    assert call.args == {"path": "x.py", "new_str": code}


def test_body_holding_its_own_closing_tag_uses_end_attribute():
    body = "<content>nested</content> and </tool>"
    rendered = render_call("edit_file", {"content": body})
    assert '<content end="content_1">' in rendered
    assert parse_message(rendered)[0].args == {"content": body}
    rendered2 = render_call("t", {"a": "</a></a_1>"})
    assert parse_message(rendered2)[0].args == {"a": "</a></a_1>"}


def test_whitespace_between_arguments_and_single_quotes():
    text = "<tool name='read_file'>\n  <path>a.py</path>\n  <start_line>3</start_line>\n</tool>"
    [call] = parse_message(text)
    assert call.error is None and call.args == {"path": "a.py", "start_line": "3"}


def test_no_calls_and_tool_result_tags_are_not_calls():
    assert parse_message("All done, the tests pass.") == []
    assert parse_message('<tool_result name="grep" index="1">x</tool_result>') == []
    assert parse_message("I will use a <tool> now") == []


def test_missing_tool_close_names_the_call():
    [call] = parse_message('<tool name="grep"><pattern>x</pattern>')
    assert call.error == "call 1 (grep): missing </tool> at the end of the message"


def test_unclosed_argument_names_the_tag():
    calls = parse_message('<tool name="a"><x>1</x></tool><tool name="b"><path>oops</tool>')
    assert calls[0].error is None
    assert calls[1].error is not None
    assert "call 2 (b)" in calls[1].error and "<path>" in calls[1].error
    assert "</path>" in calls[1].error


def test_stray_text_and_duplicates_and_empty_name():
    [c] = parse_message('<tool name="grep">hello<pattern>x</pattern></tool>')
    assert "call 1 (grep)" in c.error and "hello" in c.error
    [c] = parse_message('<tool name="grep"><p>1</p><p>2</p></tool>')
    assert "<p> is given twice" in c.error
    [c] = parse_message('<tool name=""><p>1</p></tool>')
    assert "empty name" in c.error


def test_parse_continues_after_a_bad_call():
    text = '<tool name="a">junk</tool> then <tool name="b"><q>1</q></tool>'
    calls = parse_message(text)
    assert [c.name for c in calls] == ["a", "b"]
    assert calls[0].error and calls[1].error is None and calls[1].args == {"q": "1"}


def test_render_tool_specs_lists_every_param_and_parses_its_example():
    spec = ToolSpec(
        "grep", "Search.", (ParamSpec("pattern", "regex"), ParamSpec("path", "where", False))
    )
    text = render_tool_specs([spec])
    assert "## grep" in text and "<pattern> (required)" in text and "<path> (optional)" in text
    example = text.split("Example: ")[1].splitlines()[0]
    assert parse_message(example)[0].args == {"pattern": "..."}


def test_render_result_marks_errors():
    ok = render_result(ToolResult(index=2, name="grep", output="a.py:1: x"))
    assert ok == '<tool_result name="grep" index="2">\na.py:1: x\n</tool_result>'
    bad = render_result(ToolResult(index=1, name="x", output="Error: no", is_error=True))
    assert bad.startswith('<tool_result name="x" index="1" status="error">')
