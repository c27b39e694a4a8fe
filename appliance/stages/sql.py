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
        def rename(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.Table) and _table_name(node) in views:
                alias = node.alias or node.name
                return exp.Table(this=exp.to_identifier(views[_table_name(node)]),
                                 alias=exp.TableAlias(this=exp.to_identifier(alias)))
            return node
        return self.tree.copy().transform(rename)


def _refuse(why: str) -> StageQueryRefused:
    return StageQueryRefused(f"the stage's query {why}")


def _table_name(table: exp.Table) -> str:
    return f"{table.db}.{table.name}" if table.db else table.name


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
    ctes = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    _check_functions(tree)
    _check_shapes(tree)
    sources, tables = [], []
    for table in tree.find_all(exp.Table):
        name = _table_name(table)
        if name == SOURCE or (not table.db and name in ctes):
            if name == SOURCE:
                sources.append(table)
            continue
        if not table.db or table.catalog:
            raise _refuse(f"reads {table.sql(dialect=DIALECT)}: a stage reads `source` and catalog tables "
                          "as NAMESPACE.TABLE")
        tables.append(name)
    if not sources:
        raise _refuse("does not read `source` (the rows appended to the source table since the last run)")
    _check_source_reads(tree, sources)
    kind = _kind(tree)
    return StageQuery(sql, tree, kind, tuple(dict.fromkeys(tables)))


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
    for operation in tree.find_all(exp.SetOperation):
        if not isinstance(operation, exp.Union) or operation.args.get("distinct"):
            what = "UNION without ALL" if isinstance(operation, exp.Union) else operation.key.upper()
            raise _refuse(f"uses {what}, which compares rows across runs: use UNION ALL")


def branches(tree: exp.Expression) -> list[exp.Expression]:
    """The SELECTs a UNION ALL puts together (the query itself when it is one SELECT)."""
    if isinstance(tree, exp.Union):
        return branches(tree.left) + branches(tree.right)
    return [tree]


def _reads_source(node: exp.Expression | None, ctes: dict[str, exp.Expression]) -> bool:
    if node is None:
        return False
    for table in node.find_all(exp.Table):
        name = _table_name(table)
        if name == SOURCE or (name in ctes and _reads_source(ctes[name], {})):
            return True
    return False


def _check_source_reads(tree: exp.Expression, sources: list[exp.Table]) -> None:
    """`source` read once per UNION ALL branch, from a FROM or the preserved side of a join, never
    in a subquery that aggregates, deduplicates or is a predicate."""
    ctes = {cte.alias_or_name: cte.this for cte in tree.find_all(exp.CTE)}
    parts = branches(tree)
    for branch in parts:
        reads = len([t for t in branch.find_all(exp.Table) if _table_name(t) == SOURCE])
        if reads > 1:
            raise _refuse("reads `source` more than once; rows of one run would meet only rows of the same run")
        if not reads and not _reads_source(branch, ctes):
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
    aggregates = [a for e in select.expressions for a in e.find_all(exp.AggFunc)]
    return bool(select.args.get("group") or select.args.get("distinct") or aggregates)


def _kind(tree: exp.Select | exp.Union) -> str:
    if isinstance(tree, exp.Union):
        if any(_groups(b) for b in branches(tree) if isinstance(b, exp.Select)):
            raise _refuse("groups inside a UNION ALL: group in a stage of its own")
        return APPEND
    if not _groups(tree):
        return APPEND
    for select_item in tree.expressions:
        for aggregate in select_item.find_all(exp.AggFunc):
            if not isinstance(aggregate, MERGEABLE):
                raise _refuse(f"uses {_function_name(aggregate).upper()}(), which cannot be merged run by run "
                              "(a grouping stage has count, sum, min, max, avg and count(DISTINCT ...))")
            if isinstance(aggregate.this, exp.Distinct) and isinstance(aggregate, (exp.Sum, exp.Avg)):
                raise _refuse(f"uses {_function_name(aggregate).upper()}(DISTINCT ...), which cannot be merged run "
                              "by run")
            if isinstance(aggregate.this, exp.Distinct) and len(aggregate.this.expressions) > 1:
                raise _refuse("counts DISTINCT over several columns: count one column (or a struct of them)")
    return GROUP
