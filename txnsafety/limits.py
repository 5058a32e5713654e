"""Whether the value a call returns is compared with a limit (``count() < capacity``).

A ``count()`` of some rows is the check of a check-then-act only when the code
compares it with a limit (``if seats.count() < event.capacity: create(...)``); the
same count shown in a page or asserted in a test (``assertEqual(qs.count(), 2)``)
is no check.  The ORM cannot tell, the caller's bytecode can: the checker looks at
the user frame that made the call and follows the returned value forward, through
an ``await``, through one local variable (``n = qs.count()`` ... ``if n >= cap``)
and out of a helper that returns it (``def sold(): return qs.count()``, up to three
callers), to the first comparison or the end of the expression.  An ordering comparison
(``<``, ``<=``, ``>``, ``>=``) is a limit, except with 0 or 1 (``count() > 0`` asks
whether rows exist, and a count that found some says they do); ``==`` is not a limit
(that is what asserts do).

A count of none is a check only when the count decides a branch (:func:`tested`: ``if not
qs.count()``, ``if n == 0``, ``return qs.count() < 1``), not when it is shown, asserted
(``assert``, also as pytest rewrites it; ``assertEqual(qs.count(), 0)``) or passed on.  A count returned into library
code (a template's ``{{ basket.num_lines }}``) is used there: no check.

The verdict is cached per (code object, instruction), so a count in a loop is
decided once; only a count that found rows inside a checker scope asks.
"""
from __future__ import annotations

import dis
from types import CodeType, FrameType

#: Comparisons that compare with a limit.
_ORDER = frozenset({"<", "<=", ">", ">="})
#: The instructions of an ``await`` between the call and the use of its value.
_AWAIT = frozenset({"GET_AWAITABLE", "SEND", "YIELD_VALUE", "RESUME", "JUMP_BACKWARD_NO_INTERRUPT",
                    "END_SEND", "CLEANUP_THROW", "NOP", "EXTENDED_ARG", "CACHE", "PRECALL"})
_STORE = frozenset({"STORE_FAST", "STORE_NAME", "STORE_DEREF", "STORE_GLOBAL"})
_LOAD = frozenset({"LOAD_FAST", "LOAD_NAME", "LOAD_DEREF", "LOAD_GLOBAL", "LOAD_CLASSDEREF",
                   "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR"})
#: How far after the call (or a load of the variable) a comparison may be.
_REACH = 16

#: How many callers a returned count is followed into.
_RETURNS = 3
#: A verdict: the value is returned to the caller (look there).
_RETURNED = 2

_verdicts: dict[tuple[CodeType, int, bool], int] = {}
_code_instructions: dict[CodeType, tuple[list[dis.Instruction], dict[int, int]]] = {}


def compared_with_limit(frame: FrameType | None) -> bool:
    """Whether the call ``frame`` is making (or awaiting) has its result compared with a limit."""
    return _follow(frame, False)


def tested(frame: FrameType | None) -> bool:
    """Whether the call's result decides a branch (``if not qs.count()``, ``if n == 0``): a
    count of none is a check then, not when it is shown, asserted or passed on."""
    return _follow(frame, True)


def _follow(frame: FrameType | None, any_test: bool) -> bool:
    from .sites import is_library_file
    for hop in range(_RETURNS + 1):
        if frame is None:
            return False
        code, at = frame.f_code, frame.f_lasti
        if hop and is_library_file(code.co_filename, frame.f_globals):
            return False  # returned into a library (a template, a serializer): used there, not tested here
        verdict = _verdicts.get((code, at, any_test))
        if verdict is None:
            try:
                verdict = _decide(code, at, any_test)
            except Exception:  # an unknown bytecode shape: no check (the checker never breaks a request)
                verdict = 0
            if len(_verdicts) < 10_000:
                _verdicts[(code, at, any_test)] = verdict
        if verdict != _RETURNED:
            return bool(verdict)
        frame = frame.f_back
    return False


def _instructions(code: CodeType) -> tuple[list[dis.Instruction], dict[int, int]]:
    known = _code_instructions.get(code)
    if known is None:
        instructions = list(dis.get_instructions(code))
        known = (instructions, {ins.offset: i for i, ins in enumerate(instructions)})
        if len(_code_instructions) < 2_000:
            _code_instructions[code] = known
    return known


def _decide(code: CodeType, at: int, any_test: bool) -> int:
    instructions, index = _instructions(code)
    start = index.get(at)
    if start is None:  # f_lasti inside an instruction's inline cache: the instruction before it
        start = max((i for off, i in index.items() if off <= at), default=None)
        if start is None:
            return 0
    return _flows_to_limit(instructions, start + 1, True, any_test)


def _asserted(instructions: list[dis.Instruction], jump: int) -> bool:
    """Whether the conditional jump at ``jump`` is an ``assert``'s."""
    following = instructions[jump + 1] if jump + 1 < len(instructions) else None
    return following is not None and following.opname == "LOAD_ASSERTION_ERROR"


def _flows_to_limit(instructions: list[dis.Instruction], start: int, follow_store: bool,
                    any_test: bool = False) -> int:
    """Follow the value on top of the stack at ``start`` to its first use that settles it."""
    seen = 0
    for i in range(start, min(len(instructions), start + _REACH)):
        ins = instructions[i]
        name = ins.opname
        if name in _AWAIT or (name == "LOAD_CONST" and ins.argval is None and seen == 0):
            continue
        if any_test and name == "UNARY_NOT" and seen == 0:
            continue
        if any_test and name.startswith(("POP_JUMP", "JUMP_IF")) and seen == 0:
            return int(not _asserted(instructions, i))
        if any_test and name == "COMPARE_OP":
            for j in range(i + 1, min(len(instructions), i + _REACH)):
                following = instructions[j].opname
                if following.startswith("POP_JUMP"):
                    return int(not _asserted(instructions, j))
                if following in ("PRECALL", "CALL"):
                    return 0  # assertTrue(qs.count() == 0): the comparison is passed on
                if following.startswith(("RETURN", "STORE", "POP_TOP", "JUMP")):
                    break
            return 1
        if name == "COMPARE_OP":
            before = instructions[i - 1]
            if before.opname == "LOAD_CONST" and before.argval in (0, 1) and type(before.argval) is int:
                return 0  # count() > 0, >= 1: whether rows exist, and some did
            return int(str(ins.argval).replace("bool(", "").rstrip(")") in _ORDER)
        if name == "RETURN_VALUE" and seen == 0:
            return _RETURNED
        if name in _STORE:
            if str(ins.argval).startswith("@py_assert"):
                return 0  # pytest's rewritten assert: an assertion, not a branch of the application
            if seen == 0 and follow_store:
                return _loads_compared(instructions, i, ins.argval, any_test)
            return 0
        if name.startswith(("POP_JUMP", "JUMP", "RETURN", "RAISE", "RERAISE", "POP_TOP", "FOR_ITER")):
            return 0
        seen += 1
    return 0


def _loads_compared(instructions: list[dis.Instruction], stored_at: int, variable: object,
                    any_test: bool = False) -> int:
    """Whether a later load of ``variable`` is compared with a limit or returned (before it is
    stored again)."""
    for i in range(stored_at + 1, len(instructions)):
        ins = instructions[i]
        if ins.opname in _STORE and ins.argval == variable:
            return 0
        if ins.opname in _LOAD and ins.argval == variable:
            verdict = _flows_to_limit(instructions, i + 1, False, any_test)
            if verdict:
                return verdict
    return 0
