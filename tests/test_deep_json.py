"""odf_chain.schema._json: JSON at any depth (differential against the standard library's json),
the shared nesting limit, and that nothing in the package changes the recursion limit."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from odf_chain.errors import SchemaError
from odf_chain.schema import _json
from odf_chain.schema._json import (
    MAX_NESTING,
    canonical,
    check_depth,
    decode,
    depth,
    dumps,
    loads,
    show,
)

DEEP = 100_000


def nested_list(levels: int, leaf: Any = None) -> Any:
    value: Any = [] if leaf is None else leaf
    for _ in range(levels - (leaf is None)):
        value = [value]
    return value


def same(a: Any, b: Any) -> bool:
    """Equality that also tells 0.0 from -0.0 and takes NaN as equal to itself (compared as
    text: both sides are JSON values)."""
    return type(a) is type(b) and json.dumps(a, sort_keys=False) == json.dumps(b, sort_keys=False)


# --------------------------------------------------------------------------------------------
# values and JSON text

_floats = st.floats(allow_nan=False) | st.sampled_from([1e300, -1e-300, 5e-324, -0.0, 1.5e17])
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | _floats
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=25,
)

_ws = st.sampled_from(["", "", " ", "\n", "\t ", "\r\n  "])
_number_texts = st.from_regex(
    r"-?(0|[1-9][0-9]{0,25})(\.[0-9]{1,12})?([eE][-+]?[0-9]{1,3})?", fullmatch=True
)


@st.composite
def _string_texts(draw: st.DrawFn) -> str:
    text = draw(st.text())
    encoded = json.dumps(text, ensure_ascii=draw(st.booleans()))  # \uXXXX escapes, surrogates
    # some escapes json.dumps never writes itself
    for plain, escaped in (("/", "\\/"), ("\b", "\\b"), ("\f", "\\f"), ("é", "\\u00E9")):
        if draw(st.booleans()):
            encoded = encoded.replace(plain, escaped)
    return encoded


@st.composite
def _array_text(draw: st.DrawFn, inner: st.SearchStrategy[str]) -> str:
    items = draw(st.lists(inner, max_size=4))
    ws = [draw(_ws) for _ in range(2 * len(items) + 1)]
    if not items:
        return "[" + ws[0] + "]"
    return "[" + ",".join(ws[2 * i] + item + ws[2 * i + 1] for i, item in enumerate(items)) + "]"


@st.composite
def _object_text(draw: st.DrawFn, inner: st.SearchStrategy[str]) -> str:
    values = draw(st.lists(inner, max_size=4))
    keys = draw(st.lists(_string_texts(), min_size=len(values), max_size=len(values)))
    if not values:
        return "{" + draw(_ws) + "}"
    members = (
        draw(_ws) + key + draw(_ws) + ":" + draw(_ws) + value + draw(_ws)
        for key, value in zip(keys, values, strict=True)
    )
    return "{" + ",".join(members) + "}"


json_texts = st.builds(
    lambda before, text, after: before + text + after,
    _ws,
    st.recursive(
        _number_texts | _string_texts() | st.sampled_from(["true", "false", "null"]),
        lambda inner: _array_text(inner) | _object_text(inner),
        max_leaves=25,
    ),
    _ws,
)


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(value=json_values, indent=st.sampled_from([None, 0, 2]), ascii=st.booleans())
def test_loads_equals_json_loads_on_dumped_values(value: Any, indent: int | None, ascii: bool):
    text = json.dumps(value, indent=indent, ensure_ascii=ascii)
    expected = json.loads(text)
    assert same(decode(text), expected)
    assert same(loads(text, what="doc"), expected)
    assert same(loads(text.encode(), what="doc"), expected)


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(text=json_texts)
def test_loads_equals_json_loads_on_generated_text(text: str):
    # number spellings (exponents, fractions, -0, big ints), escapes, whitespace, duplicate keys
    expected = json.loads(text)
    assert same(decode(text), expected)
    assert same(loads(text, what="doc"), expected)
    assert decode(text, object_pairs_hook=list) == json.loads(text, object_pairs_hook=list)


def test_constants_and_numbers():
    text = (
        ' [NaN, Infinity, -Infinity, 1e2, 1E+2, -0, -0.0, 0.5e-3, 1e400, "\\u00e9\\ud83d\\ude00"] '
    )
    got = decode(text)
    assert math.isnan(got[0]) and got[1:3] == [math.inf, -math.inf]
    assert got[3:] == [100.0, 100.0, 0, -0.0, 0.0005, math.inf, "é😀"]
    assert same(got[5], 0) and same(got[6], -0.0)
    assert same(loads(text, what="doc")[3:], got[3:])


def _error(text: str) -> tuple[str, int]:
    with pytest.raises(json.JSONDecodeError) as info:
        json.loads(text)
    return info.value.msg, info.value.pos


_mutations = st.sampled_from(list('[]{},:" \\0-.eE1xu'))


@pytest.mark.slow
@settings(max_examples=1000, deadline=None)
@given(text=json_texts, data=st.data())
def test_malformed_text_errors_equal_json_loads(text: str, data: st.DataObject):
    """Damage valid text (drop, insert, replace a character or cut it short): wherever json.loads
    refuses it, decode refuses it with the same message at the same position, and loads with a
    SchemaError naming the document and the position."""
    i = data.draw(st.integers(0, len(text)), label="at")
    how = data.draw(st.sampled_from(["drop", "insert", "replace", "cut"]), label="how")
    if how == "drop":
        bad = text[:i] + text[i + 1 :]
    elif how == "cut":
        bad = text[:i]
    else:
        c = data.draw(_mutations, label="char")
        bad = text[:i] + c + text[i + (how == "replace") :]
    try:
        expected = json.loads(bad)
    except json.JSONDecodeError as e:
        msg, pos = e.msg, e.pos
    else:
        assert same(decode(bad), expected)
        return
    with pytest.raises(json.JSONDecodeError) as info:
        decode(bad)
    assert (info.value.msg, info.value.pos) == (msg, pos)
    with pytest.raises(SchemaError) as err:
        loads(bad, what="the test document")
    assert str(err.value).startswith("the test document is not valid JSON: " + msg)
    assert f"(char {pos})" in str(err.value)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "[1,]",
        '{"a" 1}',
        '{"a": 1,}',
        "[1 2]",
        "{1: 2}",
        "nul",
        "-",
        "01",
        "[1] x",  # trailing garbage
        "{} {}",
        "[1, 2",  # unterminated
        '{"a": [1',
        '"abc',
        "[",
        '"\\x"',  # bad escapes
        '"\\u12"',
        '"\\ud83d\\u"',
        '"a\x01b"',  # a control character in a string
        "\ufeff[]",
    ],
)
def test_malformed_text_is_a_schema_error_naming_what_and_where(text: str):
    msg, pos = _error(text)
    with pytest.raises(json.JSONDecodeError) as info:
        decode(text)
    assert (info.value.msg, info.value.pos) == (msg, pos)
    with pytest.raises(SchemaError, match=r"^the doc is not valid JSON: .*line \d+ column \d+"):
        loads(text, what="the doc")


# --------------------------------------------------------------------------------------------
# depth beyond json.loads


@pytest.mark.slow
def test_100000_levels():
    for text, written in (
        ("[" * DEEP + "]" * DEEP, None),
        ('{"a":' * DEEP + "1" + "}" * DEEP, None),
        (
            '[{"k": ' * (DEEP // 2) + '"\\u00e9"' + "}]" * (DEEP // 2),
            '[{"k":' * (DEEP // 2) + '"é"' + "}]" * (DEEP // 2),
        ),
        (" [\n" * DEEP + "-1.5e3" + "\n] " * DEEP, "[" * DEEP + "-1500.0" + "]" * DEEP),
    ):
        with pytest.raises(RecursionError):
            json.loads(text)  # so it is the fallback that is tested
        value = loads(text, what="doc")
        assert depth(value) == DEEP
        assert dumps(value) == (written or text)  # (== would recurse)
    assert dumps(loads(("[" * DEEP + "]" * DEEP).encode(), what="doc")) == "[" * DEEP + "]" * DEEP


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * DEEP + "]" * (DEEP - 1), "Expecting ',' delimiter"),  # unterminated
        ("[" * DEEP, "Expecting value"),
        ("[" * DEEP + "]" * DEEP + " x", "Extra data"),  # trailing garbage
        ("[" * DEEP + "]" * (DEEP + 1), "Extra data"),
        ("[" * DEEP + '"\\q"' + "]" * DEEP, "Invalid \\\\escape"),  # bad escape
        ('{"a":' * DEEP + "}" * DEEP, "Expecting value"),
        ('{"a":' * DEEP + "1,}" + "}" * (DEEP - 1), "Expecting property name"),
    ],
)
def test_malformed_deep_text(text: str, message: str):
    with pytest.raises(SchemaError, match=rf"^deep doc is not valid JSON: {message}.*\(char \d+\)"):
        loads(text, what="deep doc")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r} in a JSON object")
        out[key] = value
    return out


def test_object_pairs_hook_errors_have_a_position():
    shallow = '{"a": {"b": 1, "b": 2}}'
    assert loads(shallow, what="doc") == {"a": {"b": 2}}  # json's rule without a hook
    with pytest.raises(
        SchemaError,
        match=r"^doc is not valid JSON: duplicate key 'b' in a JSON object: .*\(char 6\)$",
    ):
        loads(shallow, what="doc", object_pairs_hook=_no_duplicates)
    deep = '{"x": [' * DEEP + '{"b": 1, "b": 2}' + "]}" * DEEP
    with pytest.raises(SchemaError, match=rf"duplicate key 'b'.*\(char {7 * DEEP}\)$"):
        loads(deep, what="doc", object_pairs_hook=_no_duplicates)
    assert loads(deep.replace('"b": 2', '"c": 2'), what="doc", object_pairs_hook=_no_duplicates)


def test_too_many_digits_has_a_position():
    with pytest.raises(ValueError, match="digits"):
        json.loads("[" + "1" * 5000 + "]")  # a ValueError without a position from json
    with pytest.raises(SchemaError, match=r"^doc is not valid JSON: .*digits.*\(char 1\)$"):
        loads("[" + "1" * 5000 + "]", what="doc")
    with pytest.raises(SchemaError, match=rf"digits.*\(char {DEEP}\)$"):
        loads("[" * DEEP + "1" * 5000 + "]" * DEEP, what="doc")


def test_bytes_and_other_input():
    assert loads(b'{"a": "\xc3\xa9"}', what="doc") == {"a": "é"}
    assert loads(bytearray(b"[1]"), what="doc") == [1]
    with pytest.raises(SchemaError, match=r"^the doc is not UTF-8: "):
        loads(b'"\xff"', what="the doc")
    with pytest.raises(SchemaError, match="BOM"):
        loads(b"\xef\xbb\xbf[]", what="the doc")  # as for the decoded str
    with pytest.raises(TypeError):
        loads(42, what="doc")  # type: ignore[arg-type]


def test_a_thread_with_a_small_stack():
    """Nothing recurses per level: 100,000 levels in a thread with a 256 KiB stack (in a child
    process, which a stack overflow would kill)."""
    code = (
        "import threading\n"
        "from odf_chain.schema._json import loads, dumps, depth\n"
        "threading.stack_size(256 * 1024)\n"
        "out = []\n"
        f"text = '[{{\"a\": ' * {DEEP} + '1' + '}}]' * {DEEP}\n"
        "def work():\n"
        "    value = loads(text, what='doc')\n"
        "    out.append((depth(value), dumps(value) == text.replace(': ', ':')))\n"
        "t = threading.Thread(target=work)\n"
        "t.start()\n"
        "t.join()\n"
        "print(out)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"[({2 * DEEP}, True)]"


# --------------------------------------------------------------------------------------------
# writing

_keys = st.text() | st.integers() | st.floats() | st.booleans() | st.none()
json_values_any_keys = st.recursive(
    st.none() | st.booleans() | st.integers() | _floats | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(_keys, inner, max_size=4)
    ),
    max_leaves=25,
)


def _json_dumps(value: Any, sort_keys: bool = False) -> str:
    return json.dumps(
        value, ensure_ascii=False, separators=(",", ":"), allow_nan=False, sort_keys=sort_keys
    )


def outcome(write: Any, value: Any, **kwargs: Any) -> tuple[Any, str]:
    """The text written, or the error raised (its type and message)."""
    try:
        return "text", write(value, **kwargs)
    except (TypeError, ValueError) as e:
        return type(e), str(e)


@settings(max_examples=500, deadline=None)
@given(value=json_values_any_keys, sort_keys=st.booleans())
def test_dumps_equals_json_dumps(value: Any, sort_keys: bool):
    # non-string keys as json writes them; infinities refused (TypeError for unorderable keys)
    assert outcome(dumps, value, sort_keys=sort_keys) == outcome(
        _json_dumps, value, sort_keys=sort_keys
    )


@settings(max_examples=500, deadline=None)
@given(value=json_values)
def test_canonical_equals_sorted_json_dumps(value: Any):
    expected = outcome(_json_dumps, value, sort_keys=True)
    assert outcome(canonical, value) == expected
    if expected[0] == "text":
        assert same(loads(expected[1], what="doc"), json.loads(expected[1]))


def test_writer_errors_are_jsons():
    circular: list[Any] = [1]
    circular.append({"a": circular})
    for bad, kwargs in (
        (float("nan"), {}),
        ([float("inf")], {}),
        ({"a": object()}, {}),
        ({(1, 2): 3}, {}),
        ({float("nan"): 1}, {}),
        (circular, {}),
        (circular, {"sort_keys": True}),
        ({"a": 1, 2: 3}, {"sort_keys": True}),  # unorderable keys
    ):
        with pytest.raises((TypeError, ValueError)) as expected:
            _json_dumps(bad, **kwargs)
        with pytest.raises(type(expected.value), match=re.escape(str(expected.value))):
            dumps(bad, **kwargs)
    with pytest.raises(SchemaError, match="JSON object key 1 is not a string"):
        canonical({"a": [{1: 2}]})
    assert dumps({1: 2, None: 4, 1.5: 5, False: 6}) == '{"1":2,"null":4,"1.5":5,"false":6}'


def test_dumps_100000_levels():
    value = nested_list(DEEP, {"k": ["é", 1.5, None]})
    text = dumps(value)
    assert text == "[" * DEEP + '{"k":["é",1.5,null]}' + "]" * DEEP
    assert canonical(value) == text
    assert dumps(loads(text, what="doc")) == text  # (== would recurse)
    shared = [1]  # the same list twice is not circular
    assert dumps([shared, {"a": shared}]) == '[[1],{"a":[1]}]'


# --------------------------------------------------------------------------------------------
# depth and the nesting limit


def test_depth():
    assert [depth(v) for v in (1, "[]", None, [], {}, [1], {"a": {}}, [[], [[{}]]], ([],))] == [
        0,
        0,
        0,
        1,
        1,
        1,
        2,
        4,
        2,
    ]
    assert depth(nested_list(DEEP)) == DEEP
    assert depth({"a": nested_list(DEEP - 1)}) == DEEP
    # a value reused at every level is measured once (2**200 paths, 200 levels)
    value: Any = []
    for _ in range(200):
        value = [value, {"x": value}]
    assert depth(value) == 2 * 200 + 1 and depth([value]) == depth(value) + 1
    circular: dict[str, Any] = {}
    circular["self"] = [circular]
    with pytest.raises(ValueError, match="Circular"):
        depth(circular)


def test_depth_with_children():
    # count only lists (a dict here is a leaf, its contents ignored)
    def lists_only(v: Any) -> list | None:
        return v if isinstance(v, list) else None

    assert depth([{"a": [[[]]]}, [[]]], lists_only) == 3
    assert depth({"a": []}, lists_only) == 0


@settings(max_examples=200, deadline=None)
@given(value=json_values)
def test_depth_equals_a_recursive_definition(value: Any):
    def recursive(v: Any) -> int:
        if isinstance(v, dict):
            return 1 + max(map(recursive, v.values()), default=0)
        if isinstance(v, list):
            return 1 + max(map(recursive, v), default=0)
        return 0

    assert depth(value) == recursive(value)


def test_check_depth_at_the_limit():
    assert MAX_NESTING == 1000
    check_depth(nested_list(MAX_NESTING), "the value")
    check_depth(nested_list(MAX_NESTING - 1, {"a": 1}), "the value")
    check_depth("scalar", "the value")
    with pytest.raises(
        SchemaError, match=r"^the value is nested 1001 levels deep; at most 1000 are supported$"
    ):
        check_depth(nested_list(MAX_NESTING + 1), "the value")
    with pytest.raises(SchemaError, match="is nested 1001 levels deep"):
        check_depth(nested_list(MAX_NESTING, {"a": 1}), "the value")
    with pytest.raises(SchemaError, match=f"nested {DEEP} levels deep"):
        check_depth(loads("[" * DEEP + "]" * DEEP, what="doc"), "the value")
    circular: list[Any] = []
    circular.append(circular)
    with pytest.raises(SchemaError, match=r"^the value contains a circular reference$"):
        check_depth(circular, "the value")


def test_show():
    assert show({"a": [1, "b"]}) == "{'a': [1, 'b']}"
    assert show(nested_list(50)) == repr(nested_list(50))
    assert show(nested_list(DEEP)) == f"<list nested {DEEP} levels deep>"
    circular: list[Any] = []
    circular.append(circular)
    assert show(circular) == "[[...]]"


def test_the_limit_is_shared():
    from odf_chain.schema import avro_paths, convert

    assert avro_paths.MAX_NESTING is _json.MAX_NESTING
    assert convert.MAX_NESTING is _json.MAX_NESTING


# --------------------------------------------------------------------------------------------
# no global state


def test_no_module_changes_the_recursion_limit():
    package = Path(_json.__file__).resolve().parents[1]
    sources = sorted(package.rglob("*.py"))
    assert len(sources) > 10
    offenders = [
        str(path.relative_to(package.parent))
        for path in sources
        if "setrecursionlimit" in path.read_text(encoding="utf-8")
    ]
    assert offenders == []


def test_loads_leaves_the_recursion_limit_alone():
    limit = sys.getrecursionlimit()
    loads("[" * DEEP + "]" * DEEP, what="doc")
    dumps(nested_list(DEEP))
    assert sys.getrecursionlimit() == limit


def test_dumps_reports_errors_in_the_order_json_meets_them():
    # found by hypothesis: json turns keys into text as it reaches them, depth first, so the
    # unorderable keys of the inner object are met before the infinite key of the outer one
    value = {0: {"": None, None: None}, float("inf"): None}
    assert outcome(dumps, value, sort_keys=True) == outcome(_json_dumps, value, sort_keys=True)
    assert outcome(dumps, value, sort_keys=True)[0] is TypeError
