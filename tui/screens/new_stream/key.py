"""Step 4 of the wizard, for a stream that keeps each key's newest row: the key columns.

The key the sampled Kafka keys propose (their fields' columns) is filled in; it is checked as it
is typed against the mapping of step 3 (`appliance.model.keys.check_key`: mapped columns of a
type whose values compare exactly), the same rule `floe stream create --key` applies.
"""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Checkbox, Input, Label

from appliance.core.errors import MappingError
from appliance.model.keys import check_key, key_columns
from appliance.model.mapping import Mapping
from tui.widgets.form import FormStep, field, show_error


def parse_key(text: str) -> tuple[str, ...]:
    return key_columns(text)


class KeyStep(FormStep):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.mapping: Mapping | None = None
        self._proposed = ""  # what the wizard filled in last: a user's own key is never replaced

    def compose(self) -> ComposeResult:
        yield Label("", id="key-intro", classes="step-intro", markup=False)
        with Horizontal(classes="row"):
            yield field("Key columns (comma-separated)", Input(placeholder="id", id="key"), "key")
        yield Checkbox("Keep each change event's op, time and source position (_cdc_op, _cdc_ts, _cdc_position)",
                       id="cdc-columns")
        yield Label("", id="key-status", classes="status", markup=False)
        yield Label("", id="key-create-error", classes="error", markup=False)

    def prepare(self, mapping: Mapping | None, proposed: tuple[str, ...], cdc: str) -> None:
        """Show the step for the mapping of step 3 and the key the Kafka keys propose."""
        self.mapping = mapping
        widget = self.query_one("#key", Input)
        if widget.value == self._proposed:
            widget.value = self._proposed = ", ".join(proposed)
        how = "Debezium change events: c, r and u upsert `after`, d deletes, t truncates" if cdc else \
            "each message is its key's new row; a tombstone (a null value) deletes its key"
        found = f" The sampled Kafka keys propose {', '.join(proposed)}." if proposed else \
            " The sampled Kafka keys name no column: type the key."
        self.query_one("#key-intro", Label).update(
            f"The table keeps each key's newest row ({how}).{found}")
        self.query_one("#cdc-columns", Checkbox).display = bool(cdc)
        self.check()

    def status(self, text: str, error: bool = False) -> None:
        self.query_one("#key-status", Label).update(Text(text, style="bold red" if error else ""))

    def set_create_error(self, text: str) -> None:
        self.query_one("#key-create-error", Label).update(Text(text, style="bold red"))

    def key(self) -> tuple[str, ...]:
        return parse_key(self.query_one("#key", Input).value)

    def cdc_columns(self) -> bool:
        box = self.query_one("#cdc-columns", Checkbox)
        return bool(box.display and box.value)

    def check(self) -> str:
        """The key's mistake against the mapping, shown under the field; "" when it is right."""
        problem = ""
        if self.mapping is not None:
            try:
                check_key(self.mapping, self.key())
            except MappingError as exc:
                problem = str(exc)
        show_error(self, "key", problem)
        return problem

    @on(Input.Changed, "#key")
    def key_changed(self) -> None:
        self.check()
