"""What the rules compiler proves of a rule before its C is written (:mod:`contract.conversion_rules_c`).

Python and C part ways on four things a rule could do: divide by zero (Python raises, C's
behaviour is undefined), shift by a negative count or one of 64 and more (the same), index outside a tuple or ``bytes`` (Python raises or, for a negative
index, wraps to the end; the C reads 0 or -1), and loop (``for i in range(a, b)`` evaluates ``b``
once in Python and every turn in C, and leaves ``i`` at ``b - 1`` where C leaves it at ``b``).
So a rule is taken only where it cannot do any of them:

* every divisor of ``//`` and ``%`` is proven non-zero (a constant one is not 0), every shift
  count of ``<<`` and ``>>`` within 0 to 63 (Python raises for a negative one; C's behaviour is
  undefined there and from 64);
* every index ``T[i]`` of a module tuple is proven within ``0`` to ``len(T) - 1``, every
  ``s[i]`` of a ``bytes`` parameter within ``0`` to ``len(s) - 1``;
* a loop's body assigns neither its variable nor its bounds, and its variable is read only
  inside it;
* an ``and``/``or`` whose value is kept, not only tested, joins booleans (Python's value is
  the deciding operand, C's 0 or 1).

The proof follows the rule statement by statement, each value bounded by an interval and each
pair of values by the largest difference between them (a difference-bound matrix: ``len(s)``
is a value too, so ``stop > len(s)`` returning None bounds an ``s[i]`` of ``range(start,
stop)``), narrowed by the conditions a path passed (``if``, ``and``/``or``, ``a if c else b``).
A guard the rule writes is run by both languages alike: ``if fsp < 0 or fsp > 6: return None``
proves ``POWERS_OF_TEN[6 - fsp]``; ``T[m] if 1 <= m <= 12 else 0`` proves ``T[m]``.  What is not
proven is refused with a :class:`RuleError` naming the rule, the line and what to guard.

Pure: a rule's syntax tree in, nothing out but the error.
"""

from __future__ import annotations

import ast
import math
from typing import Iterable

from contract.errors import RuleError

__all__ = ["prove"]

INF = math.inf
#: A closed interval of integers; its ends may be -inf / inf.
Interval = tuple[float, float]
TOP: Interval = (-INF, INF)
BOOL: Interval = (0, 1)
#: The negation of a comparison (a false ``a < b`` is ``a >= b``), and the comparison mirrored.
_NEGATED = {ast.Lt: ast.GtE, ast.LtE: ast.Gt, ast.Gt: ast.LtE, ast.GtE: ast.Lt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}
_MIRRORED = {ast.Gt: ast.Lt, ast.GtE: ast.LtE}


def _mul(a: float, b: float) -> float:
    return 0 if a == 0 or b == 0 else a * b


def _hull(*intervals: Interval) -> Interval:
    return min(i[0] for i in intervals), max(i[1] for i in intervals)


class _State:
    """Bounds of the values at one point of a rule: ``m[x][y]`` bounds ``x - y`` from above;
    value 0 is the constant zero (``m[x][0]`` is x's upper bound, ``-m[0][x]`` its lower).
    None: no path reaches the point."""

    def __init__(self, size: int) -> None:
        self.m: list[list[float]] | None = [[0 if i == j else INF for j in range(size)] for i in range(size)]

    def copy(self) -> _State:
        out = _State.__new__(_State)
        out.m = None if self.m is None else [row[:] for row in self.m]
        return out

    def interval(self, x: int) -> Interval:
        return TOP if self.m is None else (-self.m[0][x], self.m[x][0])

    def add(self, x: int, y: int, c: float) -> None:
        """``x - y <= c``; the closure is kept (every bound as tight as the others allow)."""
        m = self.m
        if m is None or c >= m[x][y]:
            return
        if c + m[y][x] < 0:
            self.m = None
            return
        m[x][y] = c
        n = len(m)
        for i in range(n):
            for j in range(n):
                via = m[i][x] + c + m[y][j]
                if via < m[i][j]:
                    m[i][j] = via

    def forget(self, x: int) -> None:
        if self.m is not None:
            for i in range(len(self.m)):
                if i != x:
                    self.m[x][i] = self.m[i][x] = INF

    def join(self, other: _State) -> _State:
        if self.m is None:
            return other.copy()
        if other.m is None:
            return self.copy()
        out = self.copy()
        assert out.m is not None
        for i, row in enumerate(other.m):
            for j, v in enumerate(row):
                out.m[i][j] = max(out.m[i][j], v)
        return out


def _join(states: Iterable[_State]) -> _State:
    states = list(states)
    out = states[0]
    for s in states[1:]:
        out = out.join(s)
    return out


class _Values:
    """A rule's values bounded, and narrowed by the conditions a path passes."""

    def __init__(self, fn: ast.FunctionDef, params: dict[str, str], locals_: list[str],
                 constants: dict[str, int | tuple[int, ...]], booleans: set[str]) -> None:
        self.fn = fn
        self.params = params
        self.constants = constants
        self.booleans = booleans  # the rules returning bool
        names = [n for n, kind in params.items() if kind == "int"] + locals_
        self.var = {name: i + 1 for i, name in enumerate(names)}
        for name, kind in params.items():
            if kind == "bytes":
                self.var[f"len({name})"] = len(self.var) + 1

    def fail(self, node: ast.AST, what: str) -> RuleError:
        return RuleError(f"{self.fn.name}, line {getattr(node, 'lineno', '?')}: {what}")

    # ----------------------------------------------------------------------- values
    def variable(self, node: ast.expr) -> int | None:
        if isinstance(node, ast.Name):
            return self.var.get(node.id)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len" \
                and len(node.args) == 1 and isinstance(node.args[0], ast.Name):
            return self.var.get(f"len({node.args[0].id})")
        return None

    def linear(self, node: ast.expr, state: _State) -> list[tuple[int, Interval]]:
        """``node`` as ``x + r`` for each value ``x`` it adds (0 among them), ``r`` bounded."""
        terms: list[tuple[int, ast.expr]] = []

        def flatten(n: ast.expr, sign: int) -> None:
            if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Sub)):
                flatten(n.left, sign)
                flatten(n.right, -sign if isinstance(n.op, ast.Sub) else sign)
            elif isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
                flatten(n.operand, -sign)
            else:
                terms.append((sign, n))
        flatten(node, 1)
        bounds = []
        for sign, term in terms:
            lo, hi = self.value(term, state)
            bounds.append((lo, hi) if sign > 0 else (-hi, -lo))
        out = [(0, (sum(b[0] for b in bounds), sum(b[1] for b in bounds)))]
        for k, (sign, term) in enumerate(terms):
            x = self.variable(term)
            if sign > 0 and x is not None:
                rest = bounds[:k] + bounds[k + 1:]
                out.append((x, (sum(b[0] for b in rest), sum(b[1] for b in rest))))
        return out

    def value(self, node: ast.expr, state: _State) -> Interval:  # noqa: C901 - one branch per node type
        """``node``'s bounds where ``state`` holds; refuses a divisor or an index not proven."""
        if state.m is None:
            return TOP
        if isinstance(node, ast.Constant):
            return (int(node.value), int(node.value)) if isinstance(node.value, int) else TOP
        x = self.variable(node)
        if x is not None:
            return state.interval(x)
        if isinstance(node, ast.Name):
            value = self.constants.get(node.id)
            return (value, value) if isinstance(value, int) else TOP
        if isinstance(node, ast.BinOp):
            return self.binop(node, state)
        if isinstance(node, ast.UnaryOp):
            lo, hi = self.value(node.operand, state)
            if isinstance(node.op, ast.USub):
                return -hi, -lo
            return (lo, hi) if isinstance(node.op, ast.UAdd) else BOOL
        if isinstance(node, ast.BoolOp):  # (each operand where those before it let it run)
            out, here = BOOL, state
            for v in node.values:
                out = _hull(out, self.value(v, here))
                here = self.narrow(v, isinstance(node.op, ast.And), here)
            return out
        if isinstance(node, ast.Compare):
            here, left = state, node.left
            for op, right in zip(node.ops, node.comparators):
                self.value(left, here)
                self.value(right, here)
                here = self.compared(left, op, right, here)
                left = right
            return BOOL
        if isinstance(node, ast.IfExp):
            self.value(node.test, state)
            return _hull(self.value(node.body, self.narrow(node.test, True, state)),
                         self.value(node.orelse, self.narrow(node.test, False, state)))
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            return self.index(node, node.value.id, node.slice, state)
        if isinstance(node, ast.Call):
            for arg in node.args:
                self.value(arg, state)
            return BOOL if isinstance(node.func, ast.Name) and node.func.id in self.booleans else TOP
        return TOP

    def binop(self, node: ast.BinOp, state: _State) -> Interval:
        (a, b), (c, d) = self.value(node.left, state), self.value(node.right, state)
        op = node.op
        if isinstance(op, ast.Add):
            return a + c, b + d
        if isinstance(op, ast.Sub):
            return a - d, b - c
        if isinstance(op, ast.Mult):
            corners = [_mul(p, q) for p in (a, b) for q in (c, d)]
            return min(corners), max(corners)
        if isinstance(op, (ast.FloorDiv, ast.Mod)):
            if not (c > 0 or d < 0):
                what = "divides by zero" if c == d == 0 else \
                    f"the divisor `{ast.unparse(node.right)}` is not proven non-zero (it is within {c} to {d})"
                raise self.fail(node, f"{what}: Python raises, C's behaviour is undefined; return before "
                                      "the division where it is below 1")
            if isinstance(op, ast.Mod):
                return (0, d - 1) if c > 0 else (c + 1, 0)
            if all(math.isfinite(v) for v in (a, b, c, d)):
                corners = [int(p) // int(q) for p in (a, b) for q in (c, d)]
                return min(corners), max(corners)
            return (0, INF) if a >= 0 and c > 0 else TOP
        if isinstance(op, (ast.LShift, ast.RShift)) and not (c >= 0 and d <= 63):
            raise self.fail(node, f"the shift `{ast.unparse(node.right)}` is not proven within 0 to 63 (it is within "
                                  f"{c} to {d}): Python raises for a negative one, C's behaviour is undefined there and "
                                  "from 64; return before the shift where it is not")
        if isinstance(op, ast.RShift):
            return min(a, 0), max(b, 0)
        if isinstance(op, ast.BitAnd) and (a >= 0 or c >= 0):
            return 0, min(h for lo, h in ((a, b), (c, d)) if lo >= 0)
        if isinstance(op, (ast.BitOr, ast.BitXor)) and a >= 0 and c >= 0 and math.isfinite(max(b, d)):
            return 0, (1 << int(max(b, d)).bit_length()) - 1
        return TOP

    def index(self, node: ast.Subscript, target: str, index: ast.expr, state: _State) -> Interval:
        lo, hi = self.value(index, state)
        if self.params.get(target) == "bytes":
            size = self.var[f"len({target})"]
            m = state.m
            assert m is not None
            below = any(m[x][size] + r[1] <= -1 for x, r in self.linear(index, state))
            if lo < 0 or not below:
                raise self.fail(node, f"the index `{ast.unparse(index)}` of {target} is not proven within 0 "
                                      f"to len({target}) - 1: Python raises or wraps, the C reads -1; return "
                                      f"before the read where it is not")
            return 0, 255
        table = self.constants.get(target)
        if isinstance(table, tuple):
            if lo < 0 or hi > len(table) - 1:
                raise self.fail(node, f"the index `{ast.unparse(index)}` of {target} is not proven within 0 "
                                      f"to {len(table) - 1} (it is within {lo} to {hi}): Python raises or wraps, "
                                      f"the C reads 0; guard it (`{target}[{ast.unparse(index)}] if 0 <= "
                                      f"{ast.unparse(index)} <= {len(table) - 1} else ...`, or return before)")
            return min(table[int(lo):int(hi) + 1]), max(table[int(lo):int(hi) + 1])
        return TOP

    # ----------------------------------------------------------------------- conditions
    def compared(self, left: ast.expr, op: ast.cmpop, right: ast.expr, state: _State) -> _State:
        """``state`` where ``left op right`` holds."""
        kind = type(op)
        if kind in _MIRRORED:
            left, right, kind = right, left, _MIRRORED[kind]
        if kind not in (ast.Lt, ast.LtE, ast.Eq) or state.m is None:
            return state
        out = state.copy()
        pairs = [(lhs, rhs) for lhs in self.linear(left, state) for rhs in self.linear(right, state)]
        for (x, (a, _)), (y, (_, d)) in pairs:  # x + a <= left (<) right <= y + d
            out.add(x, y, d - a - (1 if kind is ast.Lt else 0))
        if kind is ast.Eq:
            for (x, (_, b)), (y, (c, _)) in pairs:  # y + c <= right == left <= x + b
                out.add(y, x, b - c)
        return out

    def narrow(self, test: ast.expr, truth: bool, state: _State) -> _State:
        """``state`` where ``test`` is ``truth``."""
        if state.m is None:
            return state
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self.narrow(test.operand, not truth, state)
        if isinstance(test, ast.BoolOp):
            every = isinstance(test.op, ast.And) == truth  # (a true `and`, a false `or`: each operand so)
            if every:
                for v in test.values:
                    state = self.narrow(v, truth, state)
                return state
            paths, here = [], state
            for v in test.values:
                paths.append(self.narrow(v, truth, here))
                here = self.narrow(v, not truth, here)
            return _join(paths)
        if isinstance(test, ast.Compare):
            steps = list(zip([test.left, *test.comparators], test.ops, test.comparators))
            if truth:
                for left, op, right in steps:
                    state = self.compared(left, op, right, state)
                return state
            paths, here = [], state
            for left, op, right in steps:
                negated = _NEGATED.get(type(op))
                paths.append(self.compared(left, negated(), right, here) if negated else here)
                here = self.compared(left, op, right, here)
            return _join(paths)
        if isinstance(test, ast.Constant):
            return state if bool(test.value) == truth else _unreachable(state)
        x = self.variable(test)
        if x is not None and not truth:
            out = state.copy()
            out.add(x, 0, 0)
            out.add(0, x, 0)
            return out
        return state



class _Proof:
    """One rule's proof (:func:`prove`): its statements followed, each value bounded."""

    def __init__(self, values: _Values) -> None:
        self.values = values
        self.fn = values.fn
        self.var = values.var
        self.fail = values.fail

    def assign(self, name: str, value: ast.expr, state: _State) -> _State:
        x = self.var[name]
        if state.m is None:
            return state
        facts: list[tuple[int, int, float]] = []  # (a, b, c): new a - b <= c
        old = state.m
        for y, (lo, hi) in self.values.linear(value, state):
            if y == x:  # (name = name + r: the new value is the old one moved by r)
                for z in range(len(old)):
                    if z != x:
                        facts += [(x, z, old[x][z] + hi), (z, x, old[z][x] - lo)]
            else:
                facts += [(x, y, hi), (y, x, -lo)]
        out = state.copy()
        out.forget(x)
        for a, b, c in facts:
            out.add(a, b, c)
        return out

    def block(self, body: list[ast.stmt], state: _State) -> _State:
        for node in body:
            state = self.statement(node, state)
        return state

    def statement(self, node: ast.stmt, state: _State) -> _State:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            assert isinstance(target, ast.Name) and node.value is not None
            return self.assign(target.id, node.value, state)
        if isinstance(node, ast.AugAssign):
            assert isinstance(node.target, ast.Name)
            value = ast.BinOp(left=ast.Name(id=node.target.id, ctx=ast.Load()), op=node.op, right=node.value,
                              lineno=node.lineno, col_offset=node.col_offset)
            return self.assign(node.target.id, value, state)
        if isinstance(node, ast.If):
            self.values.value(node.test, state)
            return self.block(node.body, self.values.narrow(node.test, True, state)).join(
                self.block(node.orelse, self.values.narrow(node.test, False, state)))
        if isinstance(node, ast.For):
            return self.loop(node, state)
        if isinstance(node, ast.Return):
            if node.value is not None:
                self.values.value(node.value, state)
            return _unreachable(state)
        return state  # (a docstring)

    def loop(self, node: ast.For, state: _State) -> _State:
        """``for i in range(a, b)``: every turn starts where the body's names may hold anything."""
        assert isinstance(node.target, ast.Name) and isinstance(node.iter, ast.Call)
        i = node.target.id
        start, stop = node.iter.args
        assigned = {t.id for n in ast.walk(ast.Module(body=node.body, type_ignores=[]))
                    for t in _targets(n) if isinstance(t, ast.Name)}
        for bound in (start, stop):
            if isinstance(bound, ast.Name) and bound.id in assigned:
                raise self.fail(node, f"the loop's body assigns its bound {bound.id}: Python's range() reads "
                                      "it once, C's loop every turn")
        if i in assigned:
            raise self.fail(node, f"the loop's body assigns its variable {i}: Python's next turn takes the "
                                  "range's next value, C's the assigned one plus 1")
        head = state.copy()
        for name in assigned:
            if name in self.var:
                head.forget(self.var[name])
        turn = head.copy()
        turn.forget(self.var[i])
        for bound, below in ((start, False), (stop, True)):
            for y, (lo, hi) in self.values.linear(bound, state):
                if below:  # i <= stop - 1
                    turn.add(self.var[i], y, hi - 1)
                else:  # i >= start
                    turn.add(y, self.var[i], -lo)
        out = head.join(self.block(node.body, turn))
        out.forget(self.var[i])
        return out

    def loop_variables(self) -> None:
        """A loop's variable is read inside the loop only (C leaves it at ``b``, Python at ``b - 1``)."""
        inside: set[int] = set()
        loops: dict[str, list[ast.For]] = {}
        for node in ast.walk(self.fn):
            if isinstance(node, ast.For) and isinstance(node.target, ast.Name):
                loops.setdefault(node.target.id, []).append(node)
                inside |= {id(n) for stmt in node.body for n in ast.walk(stmt)
                           if isinstance(n, ast.Name) and n.id == node.target.id}
        for node in ast.walk(self.fn):
            if isinstance(node, ast.Name) and node.id in loops and id(node) not in inside \
                    and all(node is not loop.target for loop in loops[node.id]):
                raise self.fail(node, f"{node.id}, a loop's variable, is used outside its loop: C leaves it at "
                                      "the range's end, Python at the last value (or unset)")

    def boolean_values(self) -> None:
        """An ``and``/``or`` whose value is kept (not only tested) joins booleans: Python's gives
        the deciding operand itself (``2 and 3`` is 3), C's ``&&``/``||`` gives 0 or 1."""
        tested: set[int] = set()

        def test(node: ast.expr) -> None:
            tested.add(id(node))
            if isinstance(node, ast.BoolOp):
                for v in node.values:
                    test(v)
            elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
                test(node.operand)
        for node in ast.walk(self.fn):
            if isinstance(node, (ast.If, ast.IfExp)):
                test(node.test)
        for node in ast.walk(self.fn):
            if isinstance(node, ast.BoolOp) and id(node) not in tested:
                for v in node.values:
                    if not self._boolean(v):
                        raise self.fail(v, f"`{ast.unparse(v)}` is not a boolean, and this `and`/`or`'s value is "
                                           "kept: Python's is the operand, C's 0 or 1; compare it (`... != 0`)")

    def _boolean(self, node: ast.expr) -> bool:
        if isinstance(node, (ast.Compare, ast.BoolOp)) or (isinstance(node, ast.UnaryOp)
                                                           and isinstance(node.op, ast.Not)):
            return True
        if isinstance(node, ast.Constant):
            return isinstance(node.value, bool)
        return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.values.booleans

    def check(self) -> None:
        self.loop_variables()
        self.boolean_values()
        state = _State(len(self.var) + 1)
        for name, x in self.var.items():
            if name.startswith("len("):
                state.add(0, x, 0)  # (a length is not negative)
        self.block(self.fn.body, state)


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.For)):
        return [node.target]
    return []


def _unreachable(state: _State) -> _State:
    out = state.copy()
    out.m = None
    return out


def prove(fn: ast.FunctionDef, params: dict[str, str], locals_: list[str],
          constants: dict[str, int | tuple[int, ...]], booleans: set[str]) -> None:
    """Refuse ``fn`` (a rule of the subset, its ``params`` ``int`` or ``bytes``, its locals)
    where a divisor, an index or a loop is not proven alike in Python and C; ``booleans``: the
    rules that return ``bool``."""
    _Proof(_Values(fn, params, locals_, constants, booleans)).check()
