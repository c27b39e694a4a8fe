"""`floe audit` from the stream detail: the check runs in a worker, its report shows in a modal."""

from __future__ import annotations

from rich.markup import escape
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from appliance.auditor import AuditReport, audit_stream
from tui.workers import ReportsFailures


class AuditScreen(ReportsFailures, ModalScreen[None]):
    BINDINGS = [Binding("escape", "close", "Close"), Binding("a", "run", "Audit again")]

    def __init__(self, stream: str) -> None:
        super().__init__()
        self.stream = stream

    def compose(self) -> ComposeResult:
        with Vertical(id="audit-box"):
            yield Static(f"Auditing stream [b]{escape(self.stream)}[/b]…", id="audit-verdict")
            with VerticalScroll(id="audit-scroll"):
                yield Static("", id="audit-report")
            with Horizontal(id="audit-buttons"):
                yield Button("Audit again", id="again")
                yield Button("Close", id="close", variant="primary")

    def on_mount(self) -> None:
        self.action_run()

    def action_run(self) -> None:
        self.query_one("#audit-verdict", Static).update(f"Auditing stream [b]{escape(self.stream)}[/b]…")
        self.audit()

    @work(thread=True, exclusive=True, exit_on_error=False)
    def audit(self) -> None:
        try:
            report = audit_stream(self.app.settings, self.stream)
        except Exception as exc:  # shown, not raised: the UI stays up
            self.app.call_from_thread(self.show, None, str(exc))
            return
        self.app.call_from_thread(self.show, report, "")

    def show(self, report: AuditReport | None, error: str) -> None:
        verdict = self.query_one("#audit-verdict", Static)
        if report is None:
            verdict.update(f"[b $error]Could not audit {escape(self.stream)}:[/] {escape(error)}")
            return
        if report.ok:
            verdict.update(f"[b $success]OK[/]: every offset of [b]{escape(self.stream)}[/b] landed exactly once "
                           f"({report.checked:,} offsets, {report.seconds:.1f} s)")
        else:
            lost = sum(r.count for r in report.gaps)
            dup = sum(r.count for r in report.duplicates)
            verdict.update(f"[b $error]FAILED[/]: {lost:,} offsets lost, {dup:,} duplicated, "
                           f"{len(report.problems)} other problems")
        self.query_one("#audit-report", Static).update(escape(report.render()))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "again":
            self.action_run()
        else:
            self.action_close()

    def action_close(self) -> None:
        self.dismiss(None)
