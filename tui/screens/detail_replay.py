"""The stream detail's dead-letter replay (`d`, `floe dlq replay`): a preview first, then, once confirmed, the
replay itself; a pattern stream's picked topic's dead letters alone (`floe dlq replay --topic`), else every
topic's. Done by the running engine, else by a `floe dlq replay` process (`control.dead_letters.replay_for_ui`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import work
from textual.screen import Screen

from appliance.control.dead_letters import replay_for_ui
from tui.messages import ActionDone
from tui.screens.confirm import ConfirmScreen
from tui.workers import ReportsFailures

if TYPE_CHECKING:
    from appliance.deadletters.report import ReplayReport


class ReplaysDeadLetters(ReportsFailures, Screen):
    """The stream detail screen's base: it sets `stream_name`, and says the topic picked (`replay_topic`)."""

    stream_name: str

    def replay_topic(self) -> str | None:
        return None

    def _whose(self, topic: str | None) -> str:
        return f"{self.stream_name}'s dead letters" + (f" of topic {topic}" if topic else "")

    def action_replay(self) -> None:
        """Dead letters decoded again with the mapping as it is now: the preview, and the question."""
        topic = self.replay_topic()
        self.notify(f"Previewing a replay of {self._whose(topic)}…", timeout=4)
        self.preview_replay(topic)

    @work(thread=True, exclusive=True, group="detail-replay", exit_on_error=False)
    def preview_replay(self, topic: str | None) -> None:
        try:
            report = replay_for_ui(self.app.settings, self.stream_name, dry_run=True, topic=topic)
        except Exception as exc:
            self.post_message(ActionDone(f"Replay preview: {exc}", error=True))
            return
        self.app.call_from_thread(self._confirm_replay, report, topic)

    def _confirm_replay(self, report: ReplayReport, topic: str | None) -> None:
        lines = report.lines()
        if not report.moved:  # none selected, or none would decode now: nothing to offer
            self.notify("\n".join(lines[:3]), timeout=8)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.notify(f"Replaying {self._whose(topic)}…", timeout=4)
                self.run_replay(topic)

        question = "\n".join(lines) + f"\n\nReplay {'them' if topic is None else 'topic ' + topic + '’s'} now?"
        self.app.push_screen(ConfirmScreen(question, yes="Replay"), answered)

    @work(thread=True, exclusive=True, group="detail-replay", exit_on_error=False)
    def run_replay(self, topic: str | None) -> None:
        try:
            report = replay_for_ui(self.app.settings, self.stream_name, topic=topic)
            self.post_message(ActionDone(report.lines()[0]))
        except Exception as exc:
            self.post_message(ActionDone(f"Replay: {exc}", error=True))
