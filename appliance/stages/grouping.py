"""A grouping stage kept equal to its query over the whole source, run by run.

Each run aggregates only the new rows into partial states, one per group, puts them together
with the states kept in the stage's table, and merges them group by group:

    count(x)            partial count(x)          merged sum      final the sum
    sum(x), min, max    partial sum/min/max(x)    merged same     final as merged
    avg(x)              partial sum(x), count(x)  merged sums     final sum / count, as Spark's avg
    count(DISTINCT x)   partial collect_set(x)    merged union    final its size

The table holds the query's columns and, where a column is not the state itself (an average,
a distinct count, an aggregate inside an expression, a key not selected as it is), the state in
`_floe_` columns of its own. Every final value is cast to the type the query gives it, so the
table equals what the query would give over every row at once (up to floating-point rounding,
which no parallel engine fixes either).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from sqlglot import exp

from appliance.core.errors import StageQueryRefused
from appliance.stages.sql import DIALECT, is_aggregate

HIDDEN = "_floe_"  # the prefix of the columns a grouping stage keeps for itself
MERGE = "_floe_m_"  # the prefix of the merge's own columns (keys k0.., states s0..)
Probe = Callable[[str], list[tuple[str, str]]]  # a SELECT's output: (name, Spark SQL type), in order


def _sql(node: exp.Expression) -> str:
    return node.sql(dialect=DIALECT)


def _col(name: str) -> exp.Column:
    return exp.column(exp.to_identifier(name, quoted=True))


def _cast(node: exp.Expression, type_sql: str) -> exp.Expression:
    return exp.Cast(this=node, to=exp.DataType.build(type_sql, dialect=DIALECT))


def _matches(node: exp.Expression, key: exp.Expression, keys: tuple[exp.Expression, ...]) -> bool:
    """Whether `node` is the key `key`: the same expression, or the same column written with and
    without its table (`s.region`, `region`) when no other key is a column of that name."""
    if node == key:
        return True
    if not (isinstance(node, exp.Column) and isinstance(key, exp.Column) and node.name == key.name):
        return False
    if node.table and key.table:
        return False  # `s.k` and `r.k` are two columns
    return sum(isinstance(k, exp.Column) and k.name == key.name for k in keys) == 1


@dataclass(frozen=True)
class _Aggregate:
    node: exp.AggFunc  # as the query has it
    kind: str  # count, count_distinct, sum, min, max, avg
    states: tuple[str, ...]  # the state columns' names in the merge (one, or avg's sum and count)


def _kind_of(node: exp.AggFunc) -> str:
    if isinstance(node, exp.Count):
        return "count_distinct" if isinstance(node.this, exp.Distinct) else "count"
    return {exp.Sum: "sum", exp.Min: "min", exp.Max: "max", exp.Avg: "avg"}[type(node)]


def _argument(node: exp.AggFunc) -> exp.Expression:
    arg = node.this
    if isinstance(arg, exp.Distinct):
        return arg.expressions[0]
    return arg


def _partials(agg: _Aggregate) -> list[exp.Expression]:
    arg = _argument(agg.node).copy()
    if agg.kind == "count":
        return [agg.node.copy()]
    if agg.kind == "count_distinct":
        return [exp.Anonymous(this="collect_set", expressions=[arg])]
    if agg.kind == "avg":
        return [exp.Sum(this=arg.copy()), exp.Count(this=arg)]
    return [type(agg.node)(this=arg)]


def _merge(agg: _Aggregate, state: str) -> exp.Expression:
    column = _col(state)
    if agg.kind in ("count", "sum", "avg"):
        return exp.Sum(this=column)
    if agg.kind == "count_distinct":
        flat = exp.Anonymous(this="flatten", expressions=[exp.Anonymous(this="collect_list", expressions=[column])])
        return exp.Anonymous(this="array_distinct", expressions=[flat])
    return type(agg.node)(this=column)


@dataclass(frozen=True)
class GroupPlan:
    """How a run merges the new rows into the stage's table: `run_sql(previous)` is the query whose
    result is the table's new content, `columns` what the table holds beyond the query's own."""

    query: exp.Select
    keys: tuple[exp.Expression, ...]
    key_columns: tuple[str, ...]  # where each key is kept in the table
    aggregates: tuple[_Aggregate, ...]
    state_columns: dict[str, str]  # merge state -> the table's column keeping it
    types: dict[str, str]  # output names, keys (_k*) and states -> Spark SQL type
    outputs: tuple[tuple[str, str], ...]  # the query's columns: (name, type)

    @property
    def columns(self) -> list[tuple[str, str]]:
        """Every column of the stage's table: the query's, then the hidden keys and states."""
        hidden = [(c, self.types[f"{MERGE}k{i}"]) for i, c in enumerate(self.key_columns) if c.startswith(HIDDEN)]
        hidden += [(c, self.types[s]) for s, c in self.state_columns.items() if c.startswith(HIDDEN)]
        return [*self.outputs, *hidden]

    def partial(self) -> exp.Select:
        """The new rows' partial states, one row per group."""
        select = self.query.copy()
        select.set("distinct", None)
        items = [k.copy().as_(f"{MERGE}k{i}") for i, k in enumerate(self.keys)]
        for agg in self.aggregates:
            items += [p.as_(s) for p, s in zip(_partials(agg), agg.states)]
        select.set("expressions", items)
        select.set("group", exp.Group(expressions=[k.copy() for k in self.keys]) if self.keys else None)
        return select

    def run_sql(self, previous: str) -> str:
        """The table's new content: its rows (from the view `previous`) merged with the new rows' states."""
        kept = [_col(c).as_(f"{MERGE}k{i}") for i, c in enumerate(self.key_columns)]
        kept += [_cast(_col(c), self.types[s]).as_(s) for s, c in self.state_columns.items()]
        stored = exp.select(*kept).from_(exp.to_table(previous, dialect=DIALECT))
        both = exp.union(stored, self.partial(), distinct=False)
        merged = [_col(f"{MERGE}k{i}") for i in range(len(self.keys))]
        merged += [_cast(_merge(agg, s), self.types[s]).as_(s) for agg in self.aggregates for s in agg.states]
        grouped = exp.select(*merged).from_(both.subquery("_floe_both"))
        if self.keys:
            grouped = grouped.group_by(*[_col(f"{MERGE}k{i}") for i in range(len(self.keys))])
        final = [self._final(item, name).as_(name, quoted=True)
                 for item, (name, _) in zip(self.query.expressions, self.outputs)]
        final += [_col(f"{MERGE}k{i}").as_(c, quoted=True)
                  for i, c in enumerate(self.key_columns) if c.startswith(HIDDEN)]
        final += [_col(s).as_(c, quoted=True) for s, c in self.state_columns.items() if c.startswith(HIDDEN)]
        return _sql(exp.select(*final).from_(grouped.subquery("_floe_merged")))

    def _final(self, item: exp.Expression, name: str) -> exp.Expression:
        """A select item in terms of the merged keys and states, cast to the query's type for it."""
        def rewrite(node: exp.Expression) -> exp.Expression:
            # Top-down, and never into what it replaced: an aggregate goes whole (its argument is a
            # source column, whatever the keys are), and the largest key expression wins.
            if isinstance(node, exp.AggFunc):  # only mergeable ones get here (`stages.sql`)
                return next(self._finished(a) for a in self.aggregates if a.node == node)
            if not isinstance(node, exp.Literal):
                for i, key in enumerate(self.keys):
                    if _matches(node, key, self.keys):
                        return _col(f"{MERGE}k{i}")
            return node

        return _cast((item.this if isinstance(item, exp.Alias) else item).copy().transform(rewrite), self.types[name])

    def _finished(self, agg: _Aggregate) -> exp.Expression:
        typed = self.types[f"{MERGE}t{self.aggregates.index(agg)}"]
        if agg.kind == "count_distinct":
            return _cast(exp.Anonymous(this="size", expressions=[_col(agg.states[0])]), typed)
        if agg.kind != "avg":
            return _cast(_col(agg.states[0]), typed)
        total, count = (_col(s) for s in agg.states)
        decimal = self.types[agg.states[0]].startswith("decimal")
        # As Spark's avg computes it: a decimal sum divided by the count as decimal(20,0), else doubles.
        divisor = _cast(count.copy(), "decimal(20,0)" if decimal else "double")
        quotient = exp.Div(this=total if decimal else _cast(total, "double"), expression=divisor)
        return exp.Case(ifs=[exp.If(this=exp.EQ(this=count, expression=exp.Literal.number(0)),
                                    true=_cast(exp.Null(), typed))], default=_cast(quotient, typed))


def _resolve_keys(select: exp.Select, inputs: set[str]) -> list[exp.Expression]:
    """The GROUP BY expressions, ordinals and select aliases resolved as Spark resolves them (a name
    is an input column before it is a select alias; SELECT DISTINCT and GROUP BY ALL: the items that
    aggregate nothing)."""
    items = select.expressions
    group = select.args.get("group")
    if (select.args.get("distinct") and not group) or (group and group.args.get("all")):
        return [i.this if isinstance(i, exp.Alias) else i for i in items
                if not any(isinstance(n, exp.AggFunc) or is_aggregate(n) for n in i.walk())]
    aliases = {i.alias: i.this for i in items if isinstance(i, exp.Alias)}
    keys = []
    for key in (group.expressions if group else []):
        if isinstance(key, exp.Literal) and key.is_int:
            position = int(key.name)
            if not 1 <= position <= len(items):
                raise StageQueryRefused(f"the stage's query groups by position {position}, which it does not have")
            item = items[position - 1]
            keys.append(item.this if isinstance(item, exp.Alias) else item)
        elif isinstance(key, exp.Column) and not key.table and key.name in aliases and key.name.lower() not in inputs:
            keys.append(aliases[key.name])
        else:
            keys.append(key)
    return keys


def plan(select: exp.Select, probe: Probe) -> GroupPlan:
    """The merge plan of a grouping query (`select`, its tables already bound to views); `probe`
    tells what Spark makes of a SELECT (names and types), for exact final types."""
    every = select.copy()
    for arg in ("group", "distinct", "having"):
        every.set(arg, None)
    every.set("expressions", [exp.Star()])
    keys = _resolve_keys(select, {name.lower() for name, _ in probe(_sql(every))})
    found: list[exp.AggFunc] = []
    for item in select.expressions:
        for node in item.find_all(exp.AggFunc):
            if not any(node == other for other in found):
                found.append(node)
    aggregates = []
    for j, node in enumerate(found):
        kind = _kind_of(node)
        states = (f"{MERGE}s{j}_sum", f"{MERGE}s{j}_count") if kind == "avg" else (f"{MERGE}s{j}",)
        aggregates.append(_Aggregate(node, kind, states))
    outputs = tuple(probe(_sql(select)))
    for name, _ in outputs:
        if name.startswith(HIDDEN):
            raise StageQueryRefused(f"the stage's query names a column {name!r}: names starting with {HIDDEN} "
                                    "are Floe's own")
    draft = GroupPlan(select, tuple(keys), (), tuple(aggregates), {}, {}, outputs)
    probing = draft.partial()
    originals = [a.node.copy().as_(f"{MERGE}t{j}") for j, a in enumerate(aggregates)]  # for their types
    probing.set("expressions", [*probing.expressions, *originals])
    types = dict(probe(_sql(probing)))
    types.update(dict(outputs))
    items = [(i.this if isinstance(i, exp.Alias) else i, name) for i, (name, _) in zip(select.expressions, outputs)]
    key_columns = tuple(next((n for item, n in items if _matches(item, k, tuple(keys))), f"{HIDDEN}key_{i}")
                        for i, k in enumerate(keys))
    state_columns: dict[str, str] = {}
    for j, agg in enumerate(aggregates):
        reused = next((n for item, n in items if item == agg.node), None) \
            if agg.kind in ("count", "sum", "min", "max") else None
        for state in agg.states:
            state_columns[state] = reused or f"{HIDDEN}state_{j}{state[len(f'{MERGE}s{j}'):]}"
    return GroupPlan(select, tuple(keys), key_columns, tuple(aggregates), state_columns, types, outputs)
