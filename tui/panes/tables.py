"""The Tables pane: the catalog's namespaces and tables, and one table's numbers, snapshots,
schema and maintenance.

Every catalog read runs in a worker that posts a message; the handlers fill the widgets.
The list is read when the pane is shown and on F5 / Ctrl+R, the detail when a table is
highlighted in the tree, and again when a maintenance run of it is recorded (a compaction
or retention changes its files and snapshots). The maintenance tab reads the state
database once a second by itself (tui/panes/maintenance.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import DataTable, Static, TabbedContent, TabPane, Tree
from textual.widgets.tree import TreeNode

from appliance.views.tables import Catalogue, TableView, Writer, catalogue, table_view
from tui.format import first_line, plural, size
from tui.panes.maintenance import BUTTONS, MaintenancePanel, MaintenanceRan
from tui.workers import ReportsFailures


@dataclass
class TablesLoaded(Message):
    catalogue: Catalogue | None  # None with `error`
    error: str = ""


@dataclass
class TableLoaded(Message):
    view: TableView


@dataclass
class TableFailed(Message):
    name: str
    error: str


class TablesPane(ReportsFailures, Horizontal):

    BINDINGS = [
        Binding("f5,ctrl+r", "refresh", "Refresh"),
        Binding("m", "show_maintenance", "Maintenance"),
        # Wherever the focus is in the pane (tree, tab, grid): run a task on the selected table.
        # Listed by the help screen and on the buttons, not in the footer, which they would overflow.
        *(Binding(key, f"maintain('{task}')", label, show=False) for task, label, key in BUTTONS),
    ]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.selected: str | None = None  # the table whose detail is shown or asked for
        self._listed: list[tuple[str, str]] | None = None  # the tree's tables and labels, as last built

    def compose(self) -> ComposeResult:
        with Vertical(id="tables-side"):
            yield Static("Loading tables…", id="tables-empty")
            tree: Tree[str] = Tree("catalog", id="tables-tree")
            tree.show_root = False
            tree.guide_depth = 2
            yield tree
        with Vertical(id="table-detail"):
            yield Static("Select a table.", id="table-summary")
            # Tabs, not one long column: eleven policy settings and the runs would leave
            # the snapshots and the schema a few lines each.
            with TabbedContent(id="table-tabs"):
                with TabPane("Snapshots (newest first)", id="tab-snapshots"):
                    snapshots = DataTable(id="table-snapshots", cursor_type="row", zebra_stripes=True)
                    for key, label in (("time", "Committed (UTC)"), ("operation", "Operation"),
                                       ("rows", "Rows added"), ("id", "Snapshot id")):
                        snapshots.add_column(label, key=key)
                    yield snapshots
                with TabPane("Schema", id="tab-schema"):
                    schema = DataTable(id="table-schema", cursor_type="row", zebra_stripes=True)
                    schema.add_column("Column", key="column")
                    schema.add_column("Type", key="type")
                    yield schema
                with TabPane("Schema versions", id="tab-schema-versions"):
                    versions = DataTable(id="table-schema-versions", cursor_type="row", zebra_stripes=True)
                    for key, label in (("version", "Schema"), ("time", "First committed (UTC)"),
                                       ("changes", "What changed")):
                        versions.add_column(label, key=key)
                    yield versions
                with TabPane("Partitions", id="tab-partitions"):
                    yield Static("", id="table-specs")
                    parts = DataTable(id="table-partitions", cursor_type="row", zebra_stripes=True)
                    for key, label in (("partition", "Partition"), ("spec", "Spec"), ("rows", "Rows"),
                                       ("files", "Files"), ("size", "Size"), ("deletes", "Delete files")):
                        parts.add_column(label, key=key)
                    yield parts
                with TabPane("Maintenance", id="tab-maintenance"):
                    yield MaintenancePanel(id="table-maintenance")

    def on_show(self) -> None:
        tree = self.query_one(Tree)
        if not self.app.focused or self not in self.app.focused.ancestors_with_self:
            tree.focus()
        self.load()

    def action_refresh(self) -> None:
        self.load()

    def action_show_maintenance(self) -> None:
        self.query_one("#table-tabs", TabbedContent).active = "tab-maintenance"

    def action_maintain(self, task: str) -> None:
        # The tab with the runs, so the request (and then its run) is in view.
        self.action_show_maintenance()
        self.query_one(MaintenancePanel).run_now(task)

    # Reads, in workers.

    @work(thread=True, exclusive=True, group="tables-list", exit_on_error=False)
    def load(self) -> None:
        try:
            self.post_message(TablesLoaded(catalogue(self.app.settings)))
        except Exception as exc:
            self.post_message(TablesLoaded(None, error=first_line(exc)))

    @work(thread=True, exclusive=True, group="tables-detail", exit_on_error=False)
    def load_table(self, name: str) -> None:
        try:
            view = table_view(self.app.settings, name)
        except Exception as exc:
            self.post_message(TableFailed(name, first_line(exc)))
            return
        self.post_message(TableLoaded(view))

    # Handlers, on the UI thread.

    @on(TablesLoaded)
    def show_tables(self, message: TablesLoaded) -> None:
        tree: Tree[str] = self.query_one(Tree)
        empty = self.query_one("#tables-empty", Static)
        if message.catalogue is None:
            empty.update(Text(f"Cannot read the catalog: {message.error}", style="red"))
            empty.display = True
            self.notify(message.error, title="Tables", severity="error", markup=False)
            return
        names = message.catalogue.names
        empty.display = not names
        empty.update("No tables yet. Press [b]n[/b] to create a stream, [b]Ctrl+E[/b] to start the engine.")
        labels = [self._label(name, message.catalogue.writers) for name in names]
        listed = [(name, label.markup) for name, label in zip(names, labels)]
        if listed == self._listed and self.selected in names:
            # The same tree: kept (rebuilt, its cursor would sit on its first line until laid out again), and
            # its cursor where it is: a list read before the user moved it may arrive after (under load, seconds
            # later), and moving the cursor back to the table selected then undid the move. The selected
            # table's detail read again.
            self._read(self.selected)
            return
        self._listed = listed
        tree.clear()
        namespaces: dict[str, TreeNode[str]] = {}
        for name, label in zip(names, labels):
            namespace = name.partition(".")[0]
            if namespace not in namespaces:
                namespaces[namespace] = tree.root.add(Text(namespace, style="bold"), expand=True)
            namespaces[namespace].add_leaf(label, data=name)
        want = self.selected if self.selected in names else next(iter(names), None)
        if want is None:
            self.selected = None
            self._clear_detail("")
            self.query_one(MaintenancePanel).show_table(None)
        else:
            # The new nodes have their lines once the tree has laid them out.
            self.call_after_refresh(self._show_and_load, want)

    def _show_and_load(self, name: str) -> None:
        tree: Tree[str] = self.query_one(Tree)
        # A node has its line once the tree's lines are built, which a refresh does not always do first (on a
        # loaded machine the cursor then sat on the first line, a namespace, beside the table's detail): asking
        # for the last line builds them.
        _ = tree.last_line
        for namespace in tree.root.children:
            for node in namespace.children:
                if node.data == name:
                    self.selected = name
                    tree.move_cursor(node)
                    self._read(name)
                    return

    def _read(self, name: str) -> None:
        """The table's detail and its maintenance read (again)."""
        self.load_table(name)
        self.query_one(MaintenancePanel).show_table(name)

    @staticmethod
    def _label(name: str, writers: dict[str, Writer]) -> Text:
        table = name.partition(".")[2]
        label = Text(table)
        writer = writers.get(name)
        if writer and writer.dead_letters:
            label.append("  dead letters", style="yellow")
        elif writer and writer.stream and writer.stream != table:
            label.append(f"  ← {writer.stream}", style="dim")
        return label

    @on(Tree.NodeHighlighted, "#tables-tree")
    @on(Tree.NodeSelected, "#tables-tree")
    def pick(self, event: Tree.NodeHighlighted | Tree.NodeSelected) -> None:
        name = event.node.data
        if name is None:  # a namespace
            return
        if name != self.selected or isinstance(event, Tree.NodeSelected):
            self.selected = name
            self._read(name)

    @on(MaintenanceRan)
    def maintained(self, message: MaintenanceRan) -> None:
        if message.table == self.selected:
            self.load_table(message.table)

    @on(TableLoaded)
    def show_table(self, message: TableLoaded) -> None:
        view = message.view
        if view.name != self.selected:
            return
        n_snap = len(view.snapshots)
        summary = Text()
        summary.append(view.name, style="bold")
        summary.append("\n")
        summary.append(f"{plural(view.rows, 'row')} · {plural(view.data_files, 'data file')}"
                       f" · {size(view.size_bytes)} · {plural(n_snap, 'snapshot')}"
                       f" · partitioned by {view.partitioning}")
        if view.delete_files:
            summary.append(f"\n{view.position_deletes:,} rows deleted by {plural(view.delete_files, 'delete file')} "
                           "(folded in by compaction)", style="yellow")
        summary.append(f"\n{view.location}", style="dim")
        self.query_one("#table-summary", Static).update(summary)

        snapshots = self.query_one("#table-snapshots", DataTable)
        snapshots.clear()
        for s in sorted(view.snapshots, key=lambda s: s.committed_at, reverse=True):
            snapshots.add_row(s.committed_at.strftime("%Y-%m-%d %H:%M:%S"), s.operation,
                              Text(f"{s.rows_added:,}", justify="right"), str(s.snapshot_id),
                              key=str(s.snapshot_id))
        schema = self.query_one("#table-schema", DataTable)
        schema.clear()
        for column, kind in view.schema:
            schema.add_row(Text(column), Text(kind), key=column)
        self._show_partitions(view)
        versions = self.query_one("#table-schema-versions", DataTable)
        versions.clear()
        for v in view.schema_versions:
            label = Text(str(v.schema_id) + (" (current)" if v.current else ""), style="bold" if v.current else "")
            used = v.first_used.strftime("%Y-%m-%d %H:%M:%S") if v.first_used else "no commit since"
            versions.add_row(label, used, Text("; ".join(v.changes)), key=str(v.schema_id))

    def _show_partitions(self, view: TableView) -> None:
        specs = Text()
        for spec in view.specs:
            specs.append(f"spec {spec.spec_id}: {spec.partitioning}" + (" (current)" if spec.current else "")
                         + f", {plural(spec.files, 'live file')}\n", style="bold" if spec.current else "dim")
        self.query_one("#table-specs", Static).update(specs)
        parts = self.query_one("#table-partitions", DataTable)
        parts.clear()
        for i, p in enumerate(view.partitions):
            parts.add_row(Text(p.partition), str(p.spec_id), Text(f"{p.rows:,}", justify="right"),
                          Text(f"{p.files:,}", justify="right"), Text(size(p.size_bytes), justify="right"),
                          Text(f"{p.delete_files:,}" if p.delete_files else "", justify="right"), key=str(i))

    @on(TableFailed)
    def table_failed(self, message: TableFailed) -> None:
        if message.name != self.selected:
            return
        self._clear_detail("")
        self.query_one("#table-summary", Static).update(
            Text.assemble((message.name, "bold"), "\n", (f"Cannot read this table: {message.error}", "red")))
        self.notify(message.error, title=f"Table {message.name}", severity="error", markup=False)

    def _clear_detail(self, text: str) -> None:
        self.query_one("#table-summary", Static).update(text)
        self.query_one("#table-snapshots", DataTable).clear()
        self.query_one("#table-schema", DataTable).clear()
        self.query_one("#table-schema-versions", DataTable).clear()
        self.query_one("#table-partitions", DataTable).clear()
        self.query_one("#table-specs", Static).update("")
