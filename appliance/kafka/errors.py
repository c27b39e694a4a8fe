"""confluent-kafka failures as Floe errors: each kind its own class, secrets scrubbed."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from appliance.core.errors import (
    BrokerUnreachable,
    FloeError,
    KafkaAccessDenied,
    KafkaConfigError,
    TopicNotFound,
)
from appliance.kafka.settings import KafkaSettings

ACCESS_DENIED = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError._AUTHENTICATION,
    KafkaError.SASL_AUTHENTICATION_FAILED,
}


def kafka_error(exc: BaseException | KafkaError, settings: KafkaSettings, what: str) -> FloeError:
    """A Floe error for a confluent-kafka failure (an exception or a message's error)."""
    err = exc if isinstance(exc, KafkaError) else (
        exc.args[0] if isinstance(exc, KafkaException) and exc.args else None)
    text = settings.scrub(err.str() if isinstance(err, KafkaError) else str(exc))
    code = err.code() if isinstance(err, KafkaError) else None
    if isinstance(exc, (ValueError, TypeError)) or "configuration property" in text.lower():
        return KafkaConfigError(f"kafka configuration: {text}")
    if code == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return TopicNotFound(f"{what}: topic not found on {settings.bootstrap}")
    if code in ACCESS_DENIED:
        return KafkaAccessDenied(f"{what}: access denied by {settings.bootstrap}: {text}")
    if code == KafkaError._SSL:
        return KafkaConfigError(f"{what}: {text}")
    return BrokerUnreachable(f"{what}: broker {settings.bootstrap} unreachable: {text}")
