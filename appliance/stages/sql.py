"""A stage's SQL: parsed (Spark's dialect, by sqlglot), checked for what can be kept incrementally,
classified, and given the names a run binds.

A stage runs its query over `source`, the rows appended to its source table since its last
run, so the query must give the same result whether the rows come all at once or run by run.
Row-by-row queries (filters, projections, enrichment joins) do: their output is appended. A
query that groups does too, if each aggregate can be merged (`stages.grouping`). Anything
that looks at rows of other runs (ordering, limits, window functions, `source` read twice or on
the outer side of a join) or differs from run to run (`rand()`, `now()`) cannot, and is refused
with the reason, before anything is created.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from appliance.core.errors import StageQueryRefused
from appliance.model.stage import APPEND, GROUP, SOURCE

DIALECT = "spark"
MERGEABLE = (exp.Count, exp.Sum, exp.Min, exp.Max, exp.Avg)  # aggregates `stages.grouping` can merge
# Spark's aggregate functions that sqlglot reads as plain functions: an aggregate all the same.
AGGREGATE_NAMES = {
    "try_sum", "try_avg", "every", "some", "any", "bool_and", "bool_or", "std", "stddev", "stddev_pop",
    "stddev_samp", "variance", "var_pop", "var_samp", "product", "hll_sketch_agg", "hll_union_agg",
    "histogram_numeric", "count_min_sketch", "percentile", "percentile_approx", "approx_percentile",
    "percentile_cont", "percentile_disc", "collect_list", "collect_set", "array_agg", "first", "first_value",
    "last", "last_value", "max_by", "min_by", "mode", "median", "kurtosis", "skewness", "covar_pop",
    "covar_samp", "corr", "regr_avgx", "regr_avgy", "regr_count", "regr_intercept", "regr_r2", "regr_slope",
    "regr_sxx", "regr_sxy", "regr_syy", "bit_and", "bit_or", "bit_xor", "count_if", "approx_count_distinct",
    "listagg", "string_agg", "any_value", "grouping", "grouping_id",
}
NON_DETERMINISTIC = {
    "rand", "randn", "random", "uniform", "randstr", "uuid", "shuffle", "now", "current_timestamp",
    "current_date", "current_time", "localtimestamp", "current_timezone", "monotonically_increasing_id",
    "spark_partition_id", "input_file_name", "input_file_block_start", "input_file_block_length", "reflect",
    "java_method", "try_reflect", "current_user", "user", "session_user",
}


@dataclass(frozen=True)
class StageQuery:
    """A stage's query, checked: its kind and the catalog tables it reads beside `source`."""

    sql: str
    tree: exp.Select | exp.Union
    kind: str
    tables: tuple[str, ...]  # NAMESPACE.TABLE names, each once

    def bound(self, views: dict[str, str]) -> exp.Expression:
        """The query with `source` and its tables read from the views `views` names (by `source`
        and NAMESPACE.TABLE); each keeps the name its columns are qualified with."""
        tree = self.tree.copy()
        ctes = _ctes(tree)
        for table in list(tree.find_all(exp.Table)):
            name = _table_name(table)
            if name in ctes and not table.db:
                continue
            view = views.get(SOURCE if name.lower() == SOURCE else name)
            if view is None:
                continue
            if not table.alias:  # its columns may be qualified with its name: keep that name
                table.set("alias", exp.TableAlias(this=exp.to_identifier(table.name)))
            table.set("this", exp.to_identifier(view))
            table.set("db", None)
            table.set("catalog", None)
        return tree


def _refuse(why: str) -> StageQueryRefused:
    return StageQueryRefused(f"the stage's query {why}")


def _table_name(table: exp.Table) -> str:
    return f"{table.db}.{table.name}" if table.db else table.name


def _is_source(table: exp.Table, ctes: dict[str, exp.Expression]) -> bool:
    return not table.db and table.name.lower() == SOURCE and SOURCE not in {c.lower() for c in ctes}


def _ctes(tree: exp.Expression) -> dict[str, exp.Expression]:
    return {cte.alias_or_name: cte.this for cte in tree.find_all(exp.CTE)}


def is_aggregate(node: exp.Expression) -> bool:
    """An aggregate function, whether sqlglot knows it as one or not."""
    return isinstance(node, exp.AggFunc) or (isinstance(node, exp.Anonymous) and node.name.lower() in AGGREGATE_NAMES)


def own_aggregates(select: exp.Select) -> list[exp.Expression]:
    """The aggregates a SELECT computes itself (not those of the subqueries in it)."""
    found = []
    for item in select.expressions:
        stack = [item]
        while stack:
            node = stack.pop()
            if isinstance(node, (exp.Select, exp.Subquery)):
                continue
            if is_aggregate(node):
                found.append(node)
                continue
            stack.extend(node.iter_expressions())
    return found


def _function_name(node: exp.Func) -> str:
    return (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()


def parse(sql: str) -> exp.Select | exp.Union:
    """One SELECT query (with its WITH clause), or a one-line error saying what is wrong."""
    try:
        statements = [s for s in sqlglot.parse(sql or "", read=DIALECT) if s is not None]
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        where = f" at line {first.get('line')}, column {first.get('col')}" if first.get("line") else ""
        raise StageQueryRefused(f"the stage's query does not parse{where}: "
                                f"{(first.get('description') or str(exc)).splitlines()[0]}") from None
    if not statements:
        raise _refuse("is empty: write one SELECT over `source`, the source table's rows new since the last run")
    if len(statements) != 1:
        raise _refuse(f"must be one SELECT statement, not {len(statements)}")
    tree = statements[0]
    if isinstance(tree, (exp.Insert, exp.Create, exp.Drop, exp.Delete, exp.Update, exp.Merge, exp.Command)):
        raise _refuse(f"must be a SELECT, not {tree.key.upper()}")
    if not isinstance(tree, (exp.Select, exp.SetOperation)):
        raise _refuse(f"is not a SELECT query: {' '.join(sql.split())[:60]!r}")
    return tree


def analyse(sql: str) -> StageQuery:
    """The stage's query checked and classified; StageQueryRefused says why one cannot be a stage."""
    tree = parse(sql)
    ctes = _ctes(tree)
    _check_functions(tree)
    _check_shapes(tree)
    tables = []
    for table in tree.find_all(exp.Table):
        name = _table_name(table)
        if _is_source(table, ctes) or (not table.db and name in ctes):
            continue
        if not table.db or table.catalog:
            raise _refuse(f"reads {table.sql(dialect=DIALECT)}: a stage reads `source` and catalog tables "
                          "as NAMESPACE.TABLE")
        if table.args.get("version"):
            raise _refuse(f"reads {name} as of another version: a stage reads tables as they are at each run")
        tables.append(name)
    if not _source_uses(tree, ctes):
        raise _refuse("does not read `source` (the rows appended to the source table since the last run)")
    _check_source_reads(tree, ctes)
    kind = _kind(tree)
    return StageQuery(sql, tree, kind, tuple(dict.fromkeys(tables)))


def _source_uses(node: exp.Expression, ctes: dict[str, exp.Expression], depth: int = 0) -> int:
    """How many times `node` reads `source`, directly or through the CTEs it uses (each use counted)."""
    if depth > len(ctes):
        return 0
    uses = 0
    for table in node.find_all(exp.Table):
        if any(isinstance(a, exp.CTE) for a in _ancestors(table, node)):
            continue  # inside a CTE's definition: counted where the CTE is used
        if _is_source(table, ctes):
            uses += 1
        elif not table.db and table.name in ctes:
            uses += _source_uses(ctes[table.name], ctes, depth + 1)
    return uses


def _ancestors(node: exp.Expression, top: exp.Expression) -> list[exp.Expression]:
    found, parent = [], node.parent
    while parent is not None and parent is not top:
        found.append(parent)
        parent = parent.parent
    return found


def _check_functions(tree: exp.Expression) -> None:
    for func in tree.find_all(exp.Func):
        name = _function_name(func)
        if name in NON_DETERMINISTIC or (name == "unix_timestamp" and not func.args.get("this")):
            raise _refuse(f"calls {name}(), which gives another result each run: a stage's output must not "
                          "depend on when it runs")


def _check_shapes(tree: exp.Expression) -> None:
    if tree.find(exp.Window):
        raise _refuse("uses a window function, which compares rows across runs: it cannot be kept "
                      "incrementally")
    for kind, why in ((exp.Order, "ORDER BY (a table keeps no order)"), (exp.Limit, "LIMIT"),
                      (exp.Offset, "OFFSET"), (exp.Fetch, "FETCH"), (exp.TableSample, "TABLESAMPLE")):
        if tree.find(kind):
            raise _refuse(f"uses {why}, which depends on all the rows at once: it cannot be kept incrementally")
    if tree.find(exp.Having):
        raise _refuse("uses HAVING, which filters groups on totals that change run by run: filter the "
                      "stage's table in your queries instead")
    if tree.find(exp.Filter):
        raise _refuse("uses an aggregate's FILTER (WHERE ...): write the condition inside it, as "
                      "sum(CASE WHEN ... THEN x END)")
    if tree.find(exp.Rollup, exp.Cube, exp.GroupingSets):
        raise _refuse("groups by ROLLUP, CUBE or GROUPING SETS: make a stage per grouping")
    if tree.find(exp.Pivot):
        pivot = tree.find(exp.Pivot)
        if not pivot.args.get("unpivot"):
            raise _refuse("uses PIVOT, which aggregates across runs: group in a grouping stage instead")
    for operation in tree.find_all(exp.SetOperation):
        if not isinstance(operation, exp.Union) or operation.args.get("distinct"):
            what = "UNION without ALL" if isinstance(operation, exp.Union) else operation.key.upper()
            raise _refuse(f"uses {what}, which compares rows across runs: use UNION ALL")


def branches(tree: exp.Expression) -> list[exp.Expression]:
    """The SELECTs a UNION ALL puts together (the query itself when it is one SELECT)."""
    if isinstance(tree, exp.Union):
        return branches(tree.left) + branches(tree.right)
    return [tree]


def _reads_source(node: exp.Expression | None, ctes: dict[str, exp.Expression], depth: int = 0) -> bool:
    """Whether `node` reads `source`, directly or through CTEs, however deep."""
    if node is None or depth > len(ctes):
        return False
    for table in node.find_all(exp.Table):
        if _is_source(table, ctes):
            return True
        if not table.db and table.name in ctes and _reads_source(ctes[table.name], ctes, depth + 1):
            return True
    return False


def _check_source_reads(tree: exp.Expression, ctes: dict[str, exp.Expression]) -> None:
    """`source` read once per UNION ALL branch, from a FROM or the preserved side of a join, never
    in a subquery that aggregates, deduplicates or is a predicate."""
    parts = branches(tree)
    for branch in parts:
        reads = _source_uses(branch, ctes)
        if reads > 1:
            raise _refuse("reads `source` more than once; rows of one run would meet only rows of the same run")
        if not reads:
            raise _refuse("has a UNION ALL branch that does not read `source`: each run would append its rows "
                          "again")
    for select in tree.find_all(exp.Select):
        joins = select.args.get("joins") or []
        from_ = select.args.get("from_") or select.args.get("from")  # sqlglot's key for it varies by version
        left = _reads_source(from_, ctes)
        for join in joins:
            right = _reads_source(join.this, ctes)
            side, kind = (join.side or "").upper(), (join.kind or "").upper()
            if (right and (side in ("LEFT", "FULL") or kind in ("SEMI", "ANTI"))) or \
                    (left and side in ("RIGHT", "FULL")):
                raise _refuse("reads `source` on the outer side of an outer join (or in a semi or anti join): "
                              "rows of other runs would be missing from it")
            left = left or right
        if select is not tree and select not in parts and _reads_source(select, ctes) and _groups(select):
            raise _refuse("groups or deduplicates `source` in a subquery: only the outermost SELECT may group")
    for subquery in tree.find_all(exp.Subquery):
        if not isinstance(subquery.parent, (exp.From, exp.Join)) and _reads_source(subquery, ctes):
            raise _refuse("reads `source` in a subquery used as a value or a condition")


def _groups(select: exp.Select) -> bool:
    return bool(select.args.get("group") or select.args.get("distinct") or own_aggregates(select))


def _kind(tree: exp.Select | exp.Union) -> str:
    if isinstance(tree, exp.Union):
        if any(_groups(b) for b in branches(tree) if isinstance(b, exp.Select)):
            raise _refuse("groups inside a UNION ALL: group in a stage of its own")
        return APPEND
    if not _groups(tree):
        return APPEND
    for aggregate in own_aggregates(tree):
        if not isinstance(aggregate, MERGEABLE):
            raise _refuse(f"uses {_function_name(aggregate).upper()}(), which cannot be merged run by run "
                          "(a grouping stage has count, sum, min, max, avg and count(DISTINCT ...))")
        if isinstance(aggregate.this, exp.Distinct) and isinstance(aggregate, (exp.Sum, exp.Avg)):
            raise _refuse(f"uses {_function_name(aggregate).upper()}(DISTINCT ...), which cannot be merged run by run")
        if isinstance(aggregate.this, exp.Distinct) and len(aggregate.this.expressions) > 1:
            raise _refuse("counts DISTINCT over several columns: count one column (or a struct of them)")
    return GROUP
