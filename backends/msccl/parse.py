"""Read MSCCL algorithm XML exactly as strictly as the runtimes' hand-written tokenizer does.

Lexical rules (docs/msccl-xml.md 1.5): no ``<?xml?>`` declaration (the first element must be
``<algo>``), only spaces / newlines / carriage returns between elements (a TAB is an error), every
element's attributes on one line as ``key="value"`` with double quotes and no spaces around ``=``,
no text content, names and values at most 255 characters, at most 16 attributes per element (more
are ignored, as the runtime does). Comments are allowed. Unknown elements are skipped with their
children. Numbers are read like C ``strtol(..., 0)`` (decimal, 0x hex, leading-0 octal).

Both dialects are recognised: the executor/RCCL one (requires minBytes, maxBytes, inplace, outofplace)
and the legacy microsoft/msccl one (requires name; spells reduce-scatter ``reduce_scatter``).
Anything that makes a file unreadable raises ``XmlFormatError`` naming the line and element.
"""

from __future__ import annotations

import re
from typing import Any

from collsynth.backends.msccl.model import (
    BUFFERS,
    EXECUTOR_COLLS,
    LEGACY_COLLS,
    MAX_ATTRS,
    MAX_CHANNELS,
    MAX_CHILDREN,
    MAX_TOKEN,
    PROTOCOLS,
    STEP_TYPES,
    XAlgo,
    XGpu,
    XmlFormatError,
    XStep,
    XTb,
)
from collsynth.fileio import read_text

_TAG = re.compile(r'[ \n\r]*(?:<!--(.*?)-->|<(/?)([^ \n\r\t/>="]+)((?: +[^ \n\r\t=/>"]+="[^"\n\r]*")*) *(/?)>)',
                  re.S)
_ATTR = re.compile(r' +([^ \n\r\t=/>"]+)="([^"\n\r]*)"')
_INT = re.compile(r"[+-]?(?:0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)\Z")

ALGO_EXECUTOR = ("proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace", "outofplace",
                 "minBytes", "maxBytes")
ALGO_LEGACY = ("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace")
GPU_ATTRS = ("id", "i_chunks", "o_chunks", "s_chunks")
TB_ATTRS = ("id", "send", "recv", "chan")
STEP_ATTRS = ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep")


class _Node:
    __slots__ = ("name", "attrs", "children", "line")

    def __init__(self, name: str, attrs: dict[str, str], line: int) -> None:
        self.children: list[_Node] = []
        self.name, self.attrs, self.line = name, attrs, line


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _diagnose(text: str, pos: int, source: str) -> XmlFormatError:
    """Explain why the tokenizer stops at ``pos`` (slow path, only on error)."""
    i = pos
    while i < len(text) and text[i] in " \n\r":
        i += 1
    line = _line_of(text, i)
    at = f"{source}:{line}"
    if i >= len(text):
        return XmlFormatError(f"{at}: unexpected end of file")
    ch = text[i]
    if ch != "<":
        what = "a TAB (indent with spaces)" if ch == "\t" else f"text {text[i:i + 20].splitlines()[0]!r}"
        return XmlFormatError(f"{at}: expecting '<' but found {what}; the runtime's tokenizer allows only "
                              f"spaces and newlines between elements and no text content")
    if text.startswith("<?", i):
        return XmlFormatError(f"{at}: remove the '<?...?>' declaration: the runtime reads it as an element "
                              f"and expects <algo> first")
    if text.startswith("<!--", i):
        return XmlFormatError(f"{at}: unterminated comment")
    end = text.find(">", i)
    tag = text[i:end + 1 if end >= 0 else len(text)]
    if end < 0:
        return XmlFormatError(f"{at}: unterminated element {tag[:40]!r}")
    if "\n" in tag or "\r" in tag:
        return XmlFormatError(f"{at}: element {tag.split()[0]!r} spans several lines: write all its attributes "
                              f"on one line")
    if "\t" in tag:
        return XmlFormatError(f"{at}: a TAB inside element {tag.split()[0]!r}: separate attributes with spaces")
    if "'" in tag:
        return XmlFormatError(f"{at}: single quotes in {tag[:60]!r}: write attribute values in double quotes")
    if re.search(r" =|= ", tag):
        return XmlFormatError(f"{at}: spaces around '=' in {tag[:60]!r}: write key=\"value\"")
    if re.search(r'"[^ /> ]', tag[tag.find('"', tag.find('"') + 1):] if tag.count('"') >= 2 else ""):
        return XmlFormatError(f"{at}: attributes must be separated by a space in {tag[:60]!r}")
    return XmlFormatError(f"{at}: malformed element {tag[:60]!r}")


def _tree(text: str, source: str, comments: list[str] | None = None) -> _Node:
    """Tokenize into a tree of known and unknown elements; the root must be <algo>. Comments before
    the root are appended to ``comments``."""
    pos = 0
    root: _Node | None = None
    stack: list[_Node] = []
    line, lastpos = 1, 0
    match = _TAG.match
    findall = _ATTR.findall
    count_nl = text.count
    while True:
        m = match(text, pos)
        if m is None:
            if not text[pos:].strip(" \n\r"):
                break
            raise _diagnose(text, pos, source)
        comment, closing, name, attrtext, selfclose = m.groups()
        if comment is not None:
            pos = m.end()
            if root is None and comments is not None:
                comments.append(comment.strip())
            continue
        start = m.start(2) - 1
        line += count_nl("\n", lastpos, start)
        lastpos = start
        pos = m.end()
        if len(name) > MAX_TOKEN or name[0] in "?!":
            at = f"{source}:{line}"
            if len(name) > MAX_TOKEN:
                raise XmlFormatError(f"{at}: element name longer than {MAX_TOKEN} characters")
            raise XmlFormatError(f"{at}: remove the '<{name}...>' declaration: the runtime reads it as an "
                                 f"element and expects <algo> first")
        if closing:
            if attrtext or selfclose or not stack or stack[-1].name != name:
                at = f"{source}:{line}"
                if attrtext or selfclose:
                    raise XmlFormatError(f"{at}: malformed closing tag </{name}>")
                expected = f"</{stack[-1].name}>" if stack else "nothing"
                raise XmlFormatError(f"{at}: closing tag </{name}> does not match (expected {expected})")
            stack.pop()
            continue
        pairs = findall(attrtext)
        if len(attrtext) > MAX_TOKEN:
            for k, v in pairs:
                if len(k) > MAX_TOKEN or len(v) > MAX_TOKEN:
                    raise XmlFormatError(f"{source}:{line}: attribute {k[:40]!r} of <{name}>: names and values are "
                                         f"limited to {MAX_TOKEN} characters")
        if len(pairs) > MAX_ATTRS:
            pairs = pairs[:MAX_ATTRS]  # the runtime ignores the rest
        attrs = dict(reversed(pairs))  # the first of duplicate keys wins
        node = _Node(name, attrs, line)
        if stack:
            parent = stack[-1]
            kids = parent.children
            kids.append(node)
            if len(kids) > MAX_CHILDREN:
                raise XmlFormatError(f"{source}:{line}: <{parent.name}> (line {parent.line}) has more than "
                                     f"{MAX_CHILDREN} children, which overflows the runtime's parser")
        elif root is None:
            if name != "algo":
                raise XmlFormatError(f"{source}:{line}: the first element must be <algo>, found <{name}>")
            root = node
        else:
            raise XmlFormatError(f"{source}:{line}: a second top-level element <{name}>: a file holds one <algo>")
        if not selfclose:
            stack.append(node)
    if root is None:
        raise XmlFormatError(f"{source}: no <algo> element")
    if stack:
        raise XmlFormatError(f"{source}:{stack[-1].line}: <{stack[-1].name}> is never closed")
    return root


def parse_int(value: str, what: str) -> int:
    """C strtol(value, 0) on a whole attribute value."""
    if value.isascii() and value.isdigit() and (value[0] != "0" or len(value) == 1):
        return int(value)
    if value == "-1":
        return -1
    if not _INT.match(value):
        raise XmlFormatError(f"{what}: {value!r} is not an integer")
    v = value.lstrip("+-")
    sign = -1 if value.startswith("-") else 1
    if v[:2] in ("0x", "0X"):
        return sign * int(v[2:], 16)
    if len(v) > 1 and v.startswith("0"):
        return sign * int(v[1:], 8)
    return sign * int(v)


def _need(node: _Node, keys: tuple[str, ...], what: str) -> None:
    for k in keys:
        if k not in node.attrs:
            raise XmlFormatError(f"{what}: missing required attribute {k!r}")


def _ints(node: _Node, keys: tuple[str, ...], what: str) -> list[int]:
    return [parse_int(node.attrs[k], f"{what}: attribute {k}") for k in keys]


def _algo_header(node: _Node, source: str) -> dict[str, Any]:
    a = node.attrs
    at = f"{source}:{node.line}: <algo>"
    missing_exec = [k for k in ALGO_EXECUTOR if k not in a]
    coll = a.get("coll")
    if not missing_exec and coll in EXECUTOR_COLLS:
        dialect = "executor"
    elif "name" in a and all(k in a for k in ALGO_LEGACY) and coll in LEGACY_COLLS:
        dialect = "legacy"
    else:
        for k in ("proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace"):
            if k not in a:
                raise XmlFormatError(f"{at}: missing required attribute {k!r}")
        if missing_exec and "name" not in a:
            raise XmlFormatError(f"{at}: missing required attribute {missing_exec[0]!r} (the executor and RCCL "
                                 f"require minBytes, maxBytes, inplace and outofplace; a legacy microsoft/msccl "
                                 f"file needs name instead)")
        allowed = LEGACY_COLLS if missing_exec else EXECUTOR_COLLS
        dialect_name = "legacy" if missing_exec else "executor"
        raise XmlFormatError(f"{at}: unknown coll {coll!r} for the {dialect_name} dialect: use one of "
                             f"{', '.join(allowed)}")
    if a["proto"] not in PROTOCOLS:
        raise XmlFormatError(f"{at}: unknown proto {a['proto']!r}: use Simple, LL or LL128 (exact case)")
    nch, ncpl, ngpus, inplace = _ints(node, ("nchannels", "nchunksperloop", "ngpus", "inplace"), at)
    out: dict[str, Any] = dict(name=a.get("name"), proto=a["proto"], nchannels=nch, nchunksperloop=ncpl,
                               ngpus=ngpus, coll=coll, inplace=inplace, dialect=dialect, outofplace=None,
                               min_bytes=None, max_bytes=None)
    if "outofplace" in a:
        out["outofplace"] = parse_int(a["outofplace"], f"{at}: attribute outofplace")
    if "minBytes" in a:
        out["min_bytes"] = parse_int(a["minBytes"], f"{at}: attribute minBytes")
    if "maxBytes" in a:
        out["max_bytes"] = parse_int(a["maxBytes"], f"{at}: attribute maxBytes")
    for k, attr in (("min_bytes", "minBytes"), ("max_bytes", "maxBytes")):
        if out[k] is not None and out[k] < 0:
            raise XmlFormatError(f"{at}: {attr} must be 0 or more, got {out[k]} (the runtime reads it unsigned)")
    if out["min_bytes"] is not None and out["max_bytes"] and out["min_bytes"] > out["max_bytes"]:
        raise XmlFormatError(f"{at}: minBytes {out['min_bytes']} is above maxBytes {out['max_bytes']}, so the runtime "
                             "never selects this algorithm: lower minBytes, or set maxBytes=\"0\" (no upper limit)")
    known = set(ALGO_EXECUTOR) | {"name"}
    out["extra"] = {k: v for k, v in a.items() if k not in known}
    if ngpus < 1:
        raise XmlFormatError(f"{at}: ngpus must be at least 1, got {ngpus}")
    if ncpl < 1:
        raise XmlFormatError(f"{at}: nchunksperloop must be at least 1, got {ncpl}")
    if not 1 <= nch <= MAX_CHANNELS:  # the executor fails setup ("channels available less than required"),
        # RCCL drops the algorithm (docs/msccl-xml.md 2.1)
        raise XmlFormatError(f"{at}: nchannels={nch} outside 1..{MAX_CHANNELS}: the runtime sets up at most "
                             f"MAXCHANNELS={MAX_CHANNELS} channels and refuses the algorithm; set nchannels to the "
                             f"largest chan + 1")
    for k in ("inplace", "outofplace"):
        if out[k] is not None and out[k] not in (0, 1):
            raise XmlFormatError(f"{at}: {k} must be 0 or 1, got {out[k]}")
    return out


def parse_xml_text(text: str, source: str = "<xml>") -> XAlgo:
    """Parse the text of one MSCCL algorithm file (either dialect)."""
    comments: list[str] = []
    root = _tree(text, source, comments)
    algo = XAlgo(**_algo_header(root, source), comments=comments)
    for gnode in root.children:
        if gnode.name != "gpu":
            continue
        at = f"{source}:{gnode.line}: <gpu>"
        _need(gnode, GPU_ATTRS, at)
        gid, ic, oc, sc = _ints(gnode, GPU_ATTRS, at)
        gpu = XGpu(gid, ic, oc, sc, [], gnode.line)
        for tnode in gnode.children:
            if tnode.name != "tb":
                continue
            tat = f"{source}:{tnode.line}: gpu {gid} <tb>"
            _need(tnode, TB_ATTRS, tat)
            tid, send, recv, chan = _ints(tnode, TB_ATTRS, tat)
            tb = XTb(tid, send, recv, chan, [], tnode.line)
            for snode in tnode.children:
                if snode.name != "step":
                    continue
                sa = snode.attrs
                try:
                    step = XStep(_i(sa["s"]), sa["type"], sa["srcbuf"], _i(sa["srcoff"]), sa["dstbuf"],
                                 _i(sa["dstoff"]), _i(sa["cnt"]), _i(sa["depid"]), _i(sa["deps"]), _i(sa["hasdep"]),
                                 snode.line)
                    if step.type not in STEP_TYPES or step.srcbuf not in BUFFERS or step.dstbuf not in BUFFERS:
                        raise ValueError
                except (KeyError, ValueError):
                    _step_error(snode, gid, tid, source)
                tb.steps.append(step)
            gpu.tbs.append(tb)
        algo.gpus.append(gpu)
    return algo


def _i(value: str) -> int:
    """Fast path of parse_int for plain decimals; anything else raises ValueError (then diagnosed)."""
    if value.isascii() and value.isdigit() and (value[0] != "0" or len(value) == 1):
        return int(value)
    if value == "-1":
        return -1
    return parse_int(value, "")


def _step_error(snode: _Node, gid: int, tid: int, source: str) -> None:
    """Explain what is wrong with a <step> element."""
    sat = f"{source}:{snode.line}: gpu {gid} tb {tid} <step>"
    _need(snode, STEP_ATTRS, sat)
    sa = snode.attrs
    s = parse_int(sa["s"], f"{sat}: attribute s")
    sat = f"{source}:{snode.line}: gpu {gid} tb {tid} step {s}"
    if sa["type"] not in STEP_TYPES:
        raise XmlFormatError(f"{sat}: unknown step type {sa['type']!r}: use one of {', '.join(STEP_TYPES)}")
    for k in ("srcbuf", "dstbuf"):
        if sa[k] not in BUFFERS:
            raise XmlFormatError(f"{sat}: {k}={sa[k]!r}: use i, o or s (even when unused)")
    for k in ("srcoff", "dstoff", "cnt", "depid", "deps", "hasdep"):
        parse_int(sa[k], f"{sat}: attribute {k}")
    raise XmlFormatError(f"{sat}: malformed step")  # pragma: no cover


def read_xml_file(path: str) -> XAlgo:
    """Read and parse a file; unreadable files raise XmlFormatError."""
    text = read_text(path, error=XmlFormatError)
    if text.startswith("\ufeff"):
        raise XmlFormatError(f"{path}:1: remove the byte-order mark: the runtime's tokenizer expects '<'")
    return parse_xml_text(text, path)
