"""Label and field selectors, parsed and matched the way the apiserver does.

Label selectors follow apimachinery ``pkg/labels/selector.go`` (its Lexer, Parser and
``NewRequirement``, with their error texts); key and value checks follow
``pkg/util/validation/validation.go`` (``IsQualifiedName``, ``IsValidLabelValue``) and the
messages ``pkg/util/validation/field/errors.go`` builds. Field selectors follow
``pkg/fields/selector.go`` (``splitTerms``, ``splitTerm``, ``UnescapeValue``). The apiserver
answers a parse error with 400 BadRequest and the error text as the message
(endpoints/handlers/get.go ``ListResource``: ``errors.NewBadRequest(err.Error())``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .apierror import ApiError


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!", "gt", "lt"
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "=":
            return present and value == self.values[0]
        if self.op == "!=":
            return not present or value != self.values[0]
        if self.op == "in":
            return present and value in self.values
        if self.op == "notin":
            return not present or value not in self.values
        if self.op == "exists":
            return present
        if self.op in ("gt", "lt"):
            # Requirement.Matches: both sides parsed as int64, a label that is not one fails.
            try:
                have, want = int(value or ""), int(self.values[0])
            except ValueError:
                return False
            return have > want if self.op == "gt" else have < want
        return not present


# -- validation messages (apimachinery pkg/util/validation) ----------------------------------

_QNAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QNAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)
_LABEL_VALUE_FMT = "(" + _QNAME_FMT + ")?"
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character"
)
_DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL + "(\\." + _DNS1123_LABEL + ")*"
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character"
)


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    """validation.RegexError."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def is_dns1123_subdomain(value: str) -> list[str]:
    errs = []
    if len(value) > 253:
        errs.append("must be no more than 253 characters")
    if not re.fullmatch(_DNS1123_SUBDOMAIN_FMT, value):
        errs.append(regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def is_qualified_name(value: str) -> list[str]:
    """validation.IsQualifiedName: `[prefix/]name`."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += ["prefix part " + m for m in is_dns1123_subdomain(prefix)]
    else:
        return [
            "a qualified name "
            + regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if not re.fullmatch(_QNAME_FMT, name):
        errs.append(
            "name part " + regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errs


def is_valid_label_value(value: str) -> list[str]:
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not re.fullmatch(_LABEL_VALUE_FMT, value):
        errs.append(regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def go_quote(value: Any) -> str:
    """How field.Error prints a bad value: %q for strings, %#v for string slices."""
    if isinstance(value, (list, tuple)):
        return "[]string{" + ", ".join(go_quote(v) for v in value) + "}"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def field_invalid(path: str, value: Any, detail: str) -> str:
    """field.Invalid(path, value, detail).Error(); a nil path prints as `<nil>`."""
    out = f"{path}: Invalid value: {go_quote(value)}"
    return out + (f": {detail}" if detail else "")


def aggregate(errors: list[str]) -> str:
    """utilerrors.NewAggregate(...).Error(): one message as it is, several in brackets."""
    unique = list(dict.fromkeys(errors))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


# -- the label selector lexer and parser (pkg/labels/selector.go) -----------------------------

_TOKENS = {
    ")": "CLOSED_PAR",
    ",": "COMMA",
    "!": "DOES_NOT_EXIST",
    "==": "DOUBLE_EQUALS",
    "=": "EQUALS",
    ">": "GT",
    "in": "IN",
    "<": "LT",
    "!=": "NOT_EQUALS",
    "notin": "NOT_IN",
    "(": "OPEN_PAR",
}
_SPECIAL = set("=!(),><")
_WHITESPACE = set(" \t\r\n")
_BINARY_OPERATORS = "in, notin, =, ==, !=, gt, lt"
_OPERATORS = {
    "IN": "in",
    "NOT_IN": "notin",
    "EQUALS": "=",
    "DOUBLE_EQUALS": "=",
    "NOT_EQUALS": "!=",
    "GT": "gt",
    "LT": "lt",
}


class _SelectorError(Exception):
    pass


def _lex(text: str) -> list[tuple[str, str]]:
    items: list[tuple[str, str]] = []
    pos, n = 0, len(text)
    while True:
        while pos < n and text[pos] in _WHITESPACE:
            pos += 1
        if pos >= n:
            items.append(("EOS", ""))
            return items
        if text[pos] in _SPECIAL:  # scanSpecialSymbol: the longest operator
            buf, last = "", None
            while pos < n and text[pos] in _SPECIAL:
                if buf + text[pos] in _TOKENS:
                    buf += text[pos]
                    last = (_TOKENS[buf], buf)
                    pos += 1
                elif last is not None:
                    break
                else:
                    buf += text[pos]
                    pos += 1
            items.append(last or ("ERROR", f"error expected: keyword found '{buf}'"))
            continue
        start = pos  # scanIDOrKeyword
        while pos < n and text[pos] not in _SPECIAL and text[pos] not in _WHITESPACE:
            pos += 1
        word = text[start:pos]
        items.append((_TOKENS.get(word, "IDENT") if word in ("in", "notin") else "IDENT", word))


class _Parser:
    def __init__(self, text: str) -> None:
        self.items = _lex(text)
        self.pos = 0

    def _tok(self, index: int, values: bool) -> tuple[str, str]:
        tok, lit = self.items[index]
        if values and tok in ("IN", "NOT_IN"):
            tok = "IDENT"
        return tok, lit

    def lookahead(self, values: bool = True) -> tuple[str, str]:
        return self._tok(self.pos, values)

    def consume(self, values: bool = True) -> tuple[str, str]:
        self.pos += 1
        return self._tok(self.pos - 1, values)

    def parse(self) -> list[Requirement]:
        reqs: list[Requirement] = []
        while True:
            tok, lit = self.lookahead()
            if tok in ("IDENT", "DOES_NOT_EXIST"):
                try:
                    reqs.append(self.requirement())
                except _SelectorError as err:
                    raise _SelectorError(f"unable to parse requirement: {err}") from None
                tok, lit = self.consume()
                if tok == "EOS":
                    return reqs
                if tok == "COMMA":
                    tok2, lit2 = self.lookahead()
                    if tok2 not in ("IDENT", "DOES_NOT_EXIST"):
                        raise _SelectorError(f"found '{lit2}', expected: identifier after ','")
                else:
                    raise _SelectorError(f"found '{lit}', expected: ',' or 'end of string'")
            elif tok == "EOS":
                return reqs
            else:
                raise _SelectorError(f"found '{lit}', expected: !, identifier, or 'end of string'")

    def requirement(self) -> Requirement:
        key, op = self.key_and_operator()
        if op in ("exists", "!"):
            return new_requirement(key, op, [])
        op = self.operator()
        values = self.values() if op in ("in", "notin") else self.exact_value()
        return new_requirement(key, op, sorted(values))

    def key_and_operator(self) -> tuple[str, str]:
        op = ""
        tok, lit = self.consume()
        if tok == "DOES_NOT_EXIST":
            op = "!"
            tok, lit = self.consume()
        if tok != "IDENT":
            raise _SelectorError(f"found '{lit}', expected: identifier")
        errs = is_qualified_name(lit)
        if errs:
            raise _SelectorError(field_invalid("<nil>", lit, "; ".join(errs)))
        if self.lookahead()[0] in ("EOS", "COMMA") and op != "!":
            op = "exists"
        return lit, op

    def operator(self) -> str:
        tok, lit = self.consume(values=False)
        if tok not in _OPERATORS:
            raise _SelectorError(f"found '{lit}', expected: {_BINARY_OPERATORS}")
        return _OPERATORS[tok]

    def values(self) -> set[str]:
        tok, lit = self.consume()
        if tok != "OPEN_PAR":
            raise _SelectorError(f"found '{lit}' expected: '('")
        tok, lit = self.lookahead()
        if tok in ("IDENT", "COMMA"):
            found = self.identifiers()
            if self.consume()[0] != "CLOSED_PAR":
                raise _SelectorError(f"found '{lit}', expected: ')'")
            return found
        if tok == "CLOSED_PAR":
            self.consume()
            return {""}
        raise _SelectorError(f"found '{lit}', expected: ',', ')' or identifier")

    def identifiers(self) -> set[str]:
        found: set[str] = set()
        while True:
            tok, lit = self.consume()
            if tok == "IDENT":
                found.add(lit)
                tok2, lit2 = self.lookahead()
                if tok2 == "COMMA":
                    continue
                if tok2 == "CLOSED_PAR":
                    return found
                raise _SelectorError(f"found '{lit2}', expected: ',' or ')'")
            if tok == "COMMA":
                if not found:
                    found.add("")
                tok2 = self.lookahead()[0]
                if tok2 == "CLOSED_PAR":
                    found.add("")
                    return found
                if tok2 == "COMMA":
                    self.consume()
                    found.add("")
                continue
            raise _SelectorError(f"found '{lit}', expected: ',', or identifier")

    def exact_value(self) -> set[str]:
        if self.lookahead()[0] in ("EOS", "COMMA"):
            return {""}
        tok, lit = self.consume()
        if tok == "IDENT":
            return {lit}
        raise _SelectorError(f"found '{lit}', expected: identifier")


def new_requirement(key: str, op: str, values: list[str]) -> Requirement:
    """labels.NewRequirement: the key, the number of values and each value are checked."""
    errs: list[str] = []
    key_errs = is_qualified_name(key)
    if key_errs:
        errs.append(field_invalid("key", key, "; ".join(key_errs)))
    if op in ("in", "notin") and not values:
        errs.append(
            field_invalid(
                "values", values, "for 'in', 'notin' operators, values set can't be empty"
            )
        )
    elif op in ("=", "!=") and len(values) != 1:
        errs.append(
            field_invalid("values", values, "exact-match compatibility requires one single value")
        )
    elif op in ("gt", "lt"):
        if len(values) != 1:
            errs.append(
                field_invalid(
                    "values", values, "for 'Gt', 'Lt' operators, exactly one value is required"
                )
            )
        for i, v in enumerate(values):
            if not re.fullmatch(r"[+-]?\d+", v):
                errs.append(
                    field_invalid(
                        f"values[{i}]", v, "for 'Gt', 'Lt' operators, the value must be an integer"
                    )
                )
    for i, v in enumerate(values):
        value_errs = is_valid_label_value(v)
        if value_errs:
            errs.append(field_invalid(f"values[{i}][{key}]", v, "; ".join(value_errs)))
    if errs:
        raise _SelectorError(aggregate(errs))
    return Requirement(key, op, tuple(values))


def parse_label_selector(text: str | None) -> list[Requirement]:
    """Parse `a=b,c!=d,e in (x,y),f notin (z),g,!h,n gt 3`; 400 BadRequest with the text
    apimachinery's parser gives when malformed."""
    if not text:
        return []
    try:
        return _Parser(text).parse()
    except _SelectorError as err:
        raise ApiError(400, str(err)) from None


def labels_match(reqs: list[Requirement], obj: dict[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(r.matches(labels) for r in reqs)


# -- field selectors --------------------------------------------------------------------------

# The pod fields kube-apiserver can select on (pkg/apis/core/v1/conversion.go, the Pod field
# label conversion; pkg/registry/core/pod/strategy.go ToSelectableFields).
FIELD_SELECTABLE = {
    "metadata.name",
    "metadata.namespace",
    "status.phase",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.podIP",
    "status.nominatedNodeName",
}


# The fields kube-apiserver lets you select core/v1 Events by (pkg/registry/core/event/strategy.go).
EVENT_FIELD_SELECTABLE = {
    "metadata.name",
    "metadata.namespace",
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
}

# events.k8s.io/v1 field labels -> the core Event's selectable fields
# (pkg/apis/events/v1/conversion.go AddFieldLabelConversionsForEvent).
EVENTS_V1_FIELD_LABELS = {
    "reason": "reason",
    "regarding.kind": "involvedObject.kind",
    "regarding.namespace": "involvedObject.namespace",
    "regarding.name": "involvedObject.name",
    "regarding.uid": "involvedObject.uid",
    "regarding.apiVersion": "involvedObject.apiVersion",
    "regarding.resourceVersion": "involvedObject.resourceVersion",
    "regarding.fieldPath": "involvedObject.fieldPath",
    "reportingController": "reportingComponent",
    "source": "source",
    "type": "type",
    "metadata.namespace": "metadata.namespace",
    "metadata.name": "metadata.name",
}

# Namespace field labels (pkg/apis/core/v1/conversion.go).
NAMESPACE_FIELD_SELECTABLE = {"metadata.name", "status.phase"}


def _split_terms(text: str) -> list[str]:
    """fields.splitTerms: commas not escaped by a backslash separate terms."""
    terms, start, in_slash = [], 0, False
    for i, ch in enumerate(text):
        if in_slash:
            in_slash = False
        elif ch == "\\":
            in_slash = True
        elif ch == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def _split_term(term: str) -> tuple[str, str, str] | None:
    for i in range(len(term)):
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op) :]
    return None


def _unescape(value: str) -> str:
    """fields.UnescapeValue."""
    if not any(c in value for c in "\\,="):
        return value
    out, in_slash = [], False
    for ch in value:
        if in_slash:
            if ch not in "\\,=":
                raise ApiError(400, f"invalid field selector: invalid escape sequence: \\{ch}")
            out.append(ch)
            in_slash = False
        elif ch == "\\":
            in_slash = True
        elif ch in ",=":
            raise ApiError(400, f"invalid field selector: unescaped character in value: {ord(ch)}")
        else:
            out.append(ch)
    if in_slash:
        raise ApiError(400, "invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def parse_field_selector(
    text: str | None,
    allowed: set[str] | None = None,
    labels: dict[str, str] | None = None,
    unknown: str = "field label not supported: {}",
) -> list[Requirement]:
    """Parse `metadata.name=x,status.phase!=Failed` (fields.ParseSelector), then convert each
    field label as the kind's field label conversion does: ``labels`` maps a versioned label to
    the internal one, ``allowed`` lists the internal ones; ``unknown`` is the error text."""
    if not text:
        return []
    allowed = allowed or {"metadata.name", "metadata.namespace"}
    reqs: list[Requirement] = []
    for part in sorted(_split_terms(text)):
        if part == "":
            continue
        split = _split_term(part)
        if split is None:
            raise ApiError(400, f"invalid selector: '{text}'; can't understand '{part}'")
        field, op, rhs = split
        value = _unescape(rhs)
        if labels is not None:
            if field not in labels:
                raise ApiError(400, unknown.format(field))
            field = labels[field]
        elif field not in allowed:
            raise ApiError(400, unknown.format(field))
        reqs.append(Requirement(field, "!=" if op == "!=" else "=", (value,)))
    return reqs


def _field(obj: dict[str, Any], path: str) -> str:
    if path == "source":  # event strategy.go: source.component, else reportingComponent
        source = (obj.get("source") or {}).get("component") or ""
        return source or str(obj.get("reportingComponent") or "")
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    if path == "spec.hostNetwork":
        return "true" if cur else "false"
    return "" if cur is None else str(cur)


def fields_match(reqs: list[Requirement], obj: dict[str, Any]) -> bool:
    for r in reqs:
        value = _field(obj, r.key)
        if (r.op == "=") != (value == r.values[0]):
            return False
    return True
