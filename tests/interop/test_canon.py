"""`rdv proto canon` against rdvpy.canon, byte for byte, on valid and invalid inputs."""
import pytest

from rdvpy import canon

RFC8785_SORT = ('{"\\u20ac":"Euro Sign","\\r":"Carriage Return","\\ufb33":"Hebrew Letter Dalet With Dagesh",'
                '"1":"One","\\ud83d\\ude00":"Emoji: Grinning Face","\\u0080":"Control",'
                '"\\u00f6":"Latin Small Letter O With Diaeresis"}')


def _nest_arr(n):
    return "[" * n + "]" * n


def _nest_obj(n):
    return '{"k":' * (n - 1) + "{}" + "}" * (n - 1)


def _nest_mixed(n):
    # alternating object/array, n levels in all, innermost holds a scalar
    s, close = "", ""
    for i in range(n):
        if i % 2 == 0:
            s, close = s + '{"a":', "}" + close
        else:
            s, close = s + "[", "]" + close
    return s + "1" + close


VALID = [
    "{}", "[]", "0", "-0", "1", "-1", "null", "true", "false", '""', '"a"',
    '{"b":1,"a":2}',
    RFC8785_SORT,
    '{"\\ue000":1,"\\ud83d\\ude00":2}',
    '{"\ue000":1,"\U0001f600":2}',
    '{"\uffff":1,"\U00010000":2,"\U0010ffff":3,"\ud7ff":4}',
    '{"aa":1,"a":2,"":3,"b":4,"A":5,"\\u0080":6,"é":7,"e\\u0301":8}',
    '{"a\\u0000b":1,"a":2,"a\\u001f":3}',
    '"\\u0000\\u0001\\u0007\\b\\t\\n\\u000b\\f\\r\\u000e\\u001f\\u0020\\"\\\\\\/"',
    '"\\u007f\u007f\\u0080\\u2028\\u2029\u2028\u2029"',
    '"\\u00E9\\u00e9é\\uD83D\\uDE00😀\\uFEFF"',
    '"<script>&amp;\'</script>"',
    '{"\\n":"\\r","\\t":["\\b","\\f"]}',
    '[[[[]]],[[[1]]],[[],[[]]]]',
    '[1,[2,[3,{"a":[]}]],{"b":{"c":[{}]}}]',
    '[9007199254740991,-9007199254740991,0,-0,100000000000000,-1]',
    '{"big":9007199254740991,"neg":-9007199254740991,"z":-0}',
    ' \t\r\n{ "a" : [ 1 , 2 , { "b" : null } ] , "c" : "d" } \n',
    '"\U0001f600\U0001f601\u00a0\u3000"',
    '{"key with spaces":" value ","KEY":"v","key":"v"}',
    '[true,false,null,{"true":false}]',
    _nest_arr(32), _nest_obj(32), _nest_mixed(32),
    '{"a":' + _nest_arr(31) + "}",
    '[{"v":1,"id":"rdv1:abc","sig":"x=="}]',
]

INVALID = [
    # numbers that are not integers, or out of range
    "1.0", "1e2", "1E2", "1e+2", "1e-2", "-1.5", "0.0", "-0.0", "[1.0]", '{"a":1e0}', "1.5e3",
    "9007199254740992", "-9007199254740992", "18446744073709551616", "1e400", "[12345678901234567890]",
    # duplicate member names
    '{"a":1,"a":2}', '{"a":1,"a":1}', '{"a":1,"\\u0061":2}', '{"x":{"a":1,"b":2,"a":3}}',
    '[{"k":1},{"k":1,"k":1}]', '{"\\ud83d\\ude00":1,"😀":2}',
    # lone surrogates, escaped and raw
    '"\\ud800"', '"\\udc00"', '"\\ud800x"', '"\\ud800\\u0041"', '"\\udc00\\ud800"', '"\\ud83d"',
    '{"\\ud800":1}', '"\\ude00\\ud83d"', '"\\ud800\\ud800"',
    b'"\xed\xa0\x80"', b'"\xed\xb0\x80"', b'{"\xed\xa0\xbd\xed\xb8\x80":1}',
    # too deep
    _nest_arr(33), _nest_obj(33), _nest_mixed(33), '{"a":' + _nest_arr(32) + "}",
    # invalid JSON
    "", " ", "{", "}", "[", "[1,]", '{"a":1,}', "[,1]", "01", "-01", "00", "-", "+1", "--1", "1.", ".5",
    "NaN", "Infinity", "-Infinity", "'a'", "{a:1}", '{"a" 1}', '{"a":}', "[1 2]", '"\t"', '"\n"',
    b'"\x01"', b'"\x1f"', "tru", "nul", "True", "NULL", "1 2", "{}x", "{} {}", "[]]", '"\\x41"', '"\\u12"',
    '"\\u12G4"', '"\\a"', '"\\U0001F600"', '"abc', "\u00a01", "\f1", "\v1", "[1,\u00a02]",
    b"\xff", b'"\xff"', b'"\xc0\xaf"', b'"\xe2\x82"', b'"\xf4\x90\x80\x80"', b"\x00",
    '{"a":1}\x00', "[1]//c", "/*c*/[1]",
]


def _b(x):
    return x if isinstance(x, bytes) else x.encode("utf-8")


@pytest.mark.parametrize("src", VALID, ids=lambda s: repr(s)[:60])
def test_canon_matches(rdv, src):
    want = canon.canonicalize(_b(src))
    r = rdv.run(["proto", "canon"], _b(src))
    assert r.rc == 0, "rdv refused valid input:\n" + r.describe()
    assert r.stdout == want, f"canon differs\n  input:  {_b(src)!r}\n  rdv:    {r.stdout!r}\n  rdvpy:  {want!r}"


@pytest.mark.parametrize("src", INVALID, ids=lambda s: repr(s)[:60])
def test_canon_refuses(rdv, src):
    with pytest.raises(canon.CanonError):
        canon.canonicalize(_b(src))
    rdv.refused(["proto", "canon"], _b(src))


def test_canon_is_idempotent(rdv):
    for src in VALID:
        once = rdv.ok(["proto", "canon"], _b(src))
        assert once == canon.canonicalize(_b(src))
        assert rdv.run(["proto", "canon"], once).stdout == once


def test_canon_large_document(rdv):
    doc = {(f"k{i:05d}\U0001f600" if i % 3 else chr(0xE000 + i % 10) + str(i)): [i, -i, str(i) * 3, {"x": None}]
           for i in range(2000)}
    src = canon.dumps(doc)
    shuffled = b"{" + b",".join(
        canon._str(k).encode() + b":" + canon.dumps(v) for k, v in reversed(list(doc.items()))) + b"}"
    assert rdv.ok(["proto", "canon"], shuffled) == src
