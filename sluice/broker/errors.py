"""The error every part of Sluice's SQL layer raises for a query that cannot be answered."""

from __future__ import annotations


class SqlError(Exception):
    """A query the user must fix or that failed; rendered as Druid's error JSON.

    The fields follow Druid ≥ 28: planning and validation failures are `druidException` / `invalidInput` (400),
    legacy query failures (timeout, cancel, resource limits) keep their old `error` code and `errorClass`.
    """

    def __init__(
        self,
        error_message: str,
        *,
        status: int = 400,
        error: str = "druidException",
        error_code: str = "invalidInput",
        persona: str = "USER",
        category: str = "INVALID_INPUT",
        error_class: str = "org.apache.druid.error.DruidException",
        context: dict[str, str] | None = None,
    ) -> None:
        super().__init__(error_message)
        self.status = status
        self.error = error
        self.error_code = error_code
        self.persona = persona
        self.category = category
        self.error_message = error_message
        self.error_class = error_class
        self.context = context or {}

    @classmethod
    def timeout(cls) -> SqlError:
        """The query ran past its context `timeout`."""
        return cls._legacy(
            "Query did not complete within configured timeout period. "
            "You can increase query timeout or tune the performance of query.",
            504, "Query timeout", "OPERATOR", "TIMEOUT", "QueryTimeoutException")

    @classmethod
    def cancelled(cls, query_id: str) -> SqlError:
        """The query was cancelled with `DELETE /druid/v2/sql/{sqlQueryId}` (Druid: 500, `Query cancelled`)."""
        return cls._legacy(f"Query [{query_id}] was cancelled", 500, "Query cancelled", "USER", "CANCELED",
                           "QueryInterruptedException")

    @classmethod
    def resource_limit(cls, message: str) -> SqlError:
        """The query needs more rows or memory than it may use (Druid: 400, `Resource limit exceeded`)."""
        return cls._legacy(message, 400, "Resource limit exceeded", "OPERATOR", "CAPACITY_EXCEEDED",
                           "ResourceLimitExceededException")

    @classmethod
    def capacity_exceeded(cls, capacity: int | None) -> SqlError:
        """More queries than druid.query.scheduler.numThreads at once (Druid: 429, `Query capacity exceeded`)."""
        return cls._legacy(f"Too many concurrent queries, total query capacity of {capacity} exceeded. Please try "
                           "your query again later.", 429, "Query capacity exceeded", "OPERATOR",
                           "CAPACITY_EXCEEDED", "QueryCapacityExceededException")

    @classmethod
    def lane_capacity_exceeded(cls, lane: str, capacity: int | None) -> SqlError:
        """More queries of one lane at once than its share of the slots (Druid: 429, as for the total)."""
        return cls._legacy(f"Too many concurrent queries for lane '{lane}', query capacity of {capacity} exceeded. "
                           "Please try your query again later.", 429, "Query capacity exceeded", "OPERATOR",
                           "CAPACITY_EXCEEDED", "QueryCapacityExceededException")

    @classmethod
    def unsupported(cls, message: str) -> SqlError:
        """What Druid's query engine cannot run (Druid: 501, `Unsupported operation`)."""
        return cls._legacy(message, 501, "Unsupported operation", "USER", "UNSUPPORTED", "QueryUnsupportedException")

    @classmethod
    def internal(cls, message: str) -> SqlError:
        """A failure that is not the query's fault."""
        return cls(message, status=500, error_code="general", persona="ADMIN", category="UNCATEGORIZED")

    @classmethod
    def _legacy(cls, message: str, status: int, error: str, persona: str, category: str, java_class: str) -> SqlError:
        return cls(message, status=status, error=error, error_code="legacyQueryException", persona=persona,
                   category=category, error_class=f"org.apache.druid.query.{java_class}")

    @property
    def interrupted(self) -> bool:
        """A timeout or a cancellation: Druid's request log says `interrupted` for those."""
        return self.category in ("TIMEOUT", "CANCELED")

    def java_exception(self) -> str:
        """As Druid's request log shows the exception: `class: message`."""
        return f"{self.error_class}: {self.error_message}"

    def to_json(self) -> dict[str, object]:
        return {
            "error": self.error,
            "errorCode": self.error_code,
            "persona": self.persona,
            "category": self.category,
            "errorMessage": self.error_message,
            "errorClass": self.error_class,
            "host": None,
            "context": self.context,
        }
