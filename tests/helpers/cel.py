"""The CRDs' CEL rules (``x-kubernetes-validations``), evaluated by a real CEL runtime.

cel-expr-python (Google's cel-cpp) compiles and runs the rules, with the extension libraries
Kubernetes also enables: strings, optional types, math, bindings (``cel.bind``) and encoders.
Kubernetes' own libraries (``quantity()``, ``url()``, ``isSorted()``, ``ip()``, ...) are not
there: a rule that calls one fails to compile, and ``compile_rule`` raises, so the test fails
rather than skipping the rule. Every rule of every CRD under the k8s data compiles today
(tests/unit/test_cel_rules.py).

As in the apiserver (k8s.io/apiextensions-apiserver pkg/apiserver/schema/cel/validation.go):

- a rule that references ``oldSelf`` is a transition rule: it runs only on an update, and only
  where the old value correlates (same property, same map key, same map-list key);
- a rule that evaluates to false gives its ``message`` (or ``messageExpression``, or
  ``failed rule: <rule>``); one that errors gives ``<error> evaluating rule: <rule>``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_encoders, ext_math, ext_optional, ext_strings

LIBRARY = "cel-expr-python"


class CelCompileError(Exception):
    """A rule the CEL runtime cannot compile (or a rule feature this oracle lacks)."""


class CelEvalError(Exception):
    """A rule that errored at run time (no such key, no matching overload, ...)."""


@functools.cache
def _env() -> Any:
    return cel.NewEnv(
        variables={"self": cel.Type.DYN, "oldSelf": cel.Type.DYN},
        extensions=[
            ext_strings.ExtStrings(),
            ext_optional.ExtOptional(),
            ext_math.ExtMath(),
            ext_bindings.ExtBindings(),
            ext_encoders.ExtEncoders(),
        ],
    )


# CEL string literals (raw or not, single, double or triple quoted)
_STRING_LITERAL = re.compile(
    r"""[rR]?(?:'''.*?'''|\"\"\".*?\"\"\"|'(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*")"""
)


def references_old_self(expression: str) -> bool:
    """Whether the expression names ``oldSelf`` outside string literals."""
    return re.search(r"\boldSelf\b", _STRING_LITERAL.sub("''", expression)) is not None


@dataclass(frozen=True)
class CompiledRule:
    rule: dict[str, Any]
    program: Any
    message_program: Any | None

    @property
    def text(self) -> str:
        return self.rule["rule"]

    @property
    def transition(self) -> bool:
        return references_old_self(self.text)

    def evaluate(self, value: Any, old: Any = None) -> bool:
        """True/False; raises CelEvalError on a run-time error or a non-bool result."""
        result = _run(self.program, value, old)
        if not isinstance(result, bool):
            raise CelEvalError(f"rule returned {result!r}, not a bool")
        return result

    def failure_message(self, value: Any, old: Any = None) -> str:
        """The message the apiserver gives when the rule is false."""
        if self.message_program is not None:
            try:
                msg = _run(self.message_program, value, old)
            except CelEvalError:
                msg = None
            if isinstance(msg, str) and msg.strip():
                return msg
        return self.rule.get("message") or f"failed rule: {self.text}"


def _run(program: Any, value: Any, old: Any) -> Any:
    data = {"self": value} if old is None else {"self": value, "oldSelf": old}
    try:
        result = program.eval(data=data)
    except Exception as exc:  # the binding raises for some run-time failures
        raise CelEvalError(str(exc)) from exc
    if result.type() == cel.Type.ERROR:
        raise CelEvalError(str(result.value()))
    return result.plain_value()


def _compile(expression: str) -> Any:
    try:
        return _env().compile(expression)
    except Exception as exc:
        raise CelCompileError(f"{LIBRARY} cannot compile {expression!r}: {exc}") from exc


@functools.cache
def _compile_cached(rule_text: str, message_expression: str | None) -> tuple[Any, Any]:
    return _compile(rule_text), (_compile(message_expression) if message_expression else None)


def compile_rule(rule: dict[str, Any]) -> CompiledRule:
    """Compile one ``x-kubernetes-validations`` entry; CelCompileError if it cannot be run."""
    unsupported = sorted(set(rule) - {"rule", "message", "messageExpression", "reason"})
    if unsupported:
        # fieldPath and optionalOldSelf change where and when a rule runs: not built here.
        raise CelCompileError(f"rule {rule['rule']!r} uses {unsupported}: not in this oracle")
    program, message_program = _compile_cached(rule["rule"], rule.get("messageExpression"))
    return CompiledRule(rule, program, message_program)
