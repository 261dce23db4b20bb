"""The bundled sample data set: Wikipedia edits like Druid's ``wikiticker`` tutorial, with bad records.

Demos, tests and benchmarks need the same realistic stream every time: skewed dimensions (a few
channels, pages and users dominate, as in real edit streams) so rollup has something to do, a
daily traffic curve, and a small fixed share of broken records so parse-error accounting is
exercised. Everything is derived from one seed, so a given ``(n, seed)`` always yields the same bytes.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Producer

from sluice.stream.kafka import KafkaStream

__all__ = ["BAD_RECORD_RATE", "DAY", "SampleRecord", "generate", "generate_flat", "produce"]

#: the day all events fall on (UTC), as in Druid's wikiticker-2015-09-12 sample
DAY = "2015-09-12"
#: share of records of EACH bad kind; e.g. 300 of each in 300,000 records
BAD_RECORD_RATE = 0.001
_BAD_KINDS = ("malformed_json", "missing_time", "bad_time")
_to_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

_CHANNELS = [
    "en", "vi", "de", "fr", "it", "es", "ru", "ja", "zh", "pl", "nl", "pt", "sv", "ar", "ca",
    "uk", "ko", "fa", "he", "cs", "hu", "fi", "no", "tr", "id", "ro", "sr", "el", "da", "sh",
]
_NAMESPACES = {
    "Main": 72, "User": 6, "Talk": 5, "User talk": 5, "Wikipedia": 4,
    "Category": 3, "Template": 2, "File": 2, "Wikipedia talk": 1,
}
_GEO = [  # (cityName, countryIsoCode, countryName) for anonymous editors
    ("New York", "US", "United States"), ("Los Angeles", "US", "United States"),
    ("London", "GB", "United Kingdom"), ("Manchester", "GB", "United Kingdom"),
    ("Berlin", "DE", "Germany"), ("München", "DE", "Germany"), ("Paris", "FR", "France"),
    ("Lyon", "FR", "France"), ("Milan", "IT", "Italy"), ("Madrid", "ES", "Spain"),
    ("Buenos Aires", "AR", "Argentina"), ("Moscow", "RU", "Russia"), ("Tokyo", "JP", "Japan"),
    ("Taipei", "TW", "Taiwan"), ("Warsaw", "PL", "Poland"), ("Amsterdam", "NL", "Netherlands"),
    ("São Paulo", "BR", "Brazil"), ("Stockholm", "SE", "Sweden"), ("Cairo", "EG", "Egypt"),
    ("Kyiv", "UA", "Ukraine"), ("Seoul", "KR", "Republic of Korea"), ("Tehran", "IR", "Iran"),
    ("Hanoi", "VN", "Vietnam"), ("Mumbai", "IN", "India"), ("Sydney", "AU", "Australia"),
    ("Toronto", "CA", "Canada"), ("Mexico City", "MX", "Mexico"), ("Zürich", "CH", "Switzerland"),
    ("Kraków", "PL", "Poland"), ("Istanbul", "TR", "Turkey"),
]
_HOURLY_TRAFFIC = [  # relative edits per UTC hour: the European/American evening peaks of wikiticker
    60, 55, 50, 45, 42, 45, 52, 62, 72, 80, 86, 90, 94, 97, 100, 100, 98, 96, 94, 90, 86, 80, 72, 65,
]
_TOPICS = [
    "History", "Geography", "Music", "Football", "Railway", "Election", "River", "Album", "Film",
    "Church", "Castle", "University", "Airport", "Battle", "Novel", "Mountain", "Dynasty", "Village",
    "Festival", "Language", "Bridge", "Museum", "Island", "Opera", "Cathedral", "Satellite", "Treaty",
]
_PLACES = [
    "Oklahoma", "Bavaria", "Kraków", "São Paulo", "Québec", "Hokkaido", "Zürich", "Andalusia",
    "Catalonia", "Ontario", "Tasmania", "Sicily", "Crete", "Lapland", "Patagonia", "Bengal",
]
_NAME_PARTS = ["Al", "Be", "Car", "Da", "El", "Fa", "Gor", "Hel", "Ian", "Jo", "Ka", "Lo", "Mar", "Ni",
               "Ol", "Pe", "Quin", "Ro", "Sa", "Tor", "Ul", "Vik", "Wen", "Xa", "Yu", "Zed"]
_BOTS = ["Cheers!-bot", "ClueBot NG", "JBot", "Addbot", "KrBot", "SieBot", "AvocatoBot", "Xqbot",
         "EmausBot", "MerlIwBot", "Legobot", "YiFeiBot", "ZéroBot", "InternetArchiveBot", "Citation bot"]


@dataclass(frozen=True, slots=True)
class SampleRecord:
    """One Kafka message of the sample stream and what a correct parser must make of it."""

    value: bytes
    event: dict[str, Any] | None  # the parsed event when ``kind == "valid"``
    kind: str  # "valid", "malformed_json", "missing_time" or "bad_time"


def _zipf_cum_weights(size: int, exponent: float) -> list[float]:
    """Cumulative Zipf weights for ranks 1..size, for ``random.choices(cum_weights=...)``."""
    return list(itertools.accumulate(1.0 / rank**exponent for rank in range(1, size + 1)))


def _vocabulary(rng: random.Random) -> tuple[list[str], list[str], list[str]]:
    """Page titles, registered user names and anonymous IPs, each ordered by popularity rank."""
    titles = sorted({
        rng.choice([
            f"{rng.choice(_TOPICS)} of {rng.choice(_PLACES)}",
            f"List of {rng.choice(_TOPICS).lower()}s in {rng.choice(_PLACES)}",
            f"{rng.randint(1850, 2015)} in {rng.choice(_PLACES)}",
            f"{rng.choice(_NAME_PARTS)}{rng.choice(_NAME_PARTS).lower()} ({rng.choice(_TOPICS).lower()})",
        ])
        for _ in range(25_000)
    })
    rng.shuffle(titles)
    users = sorted({
        rng.choice(_NAME_PARTS) + rng.choice(_NAME_PARTS).lower() + rng.choice(["", str(rng.randint(1, 999)), "_wiki"])
        for _ in range(6_000)
    })
    rng.shuffle(users)
    ips = [f"{rng.randint(1, 223)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}" for _ in range(3_000)]
    return titles, users, ips


def _edit_sizes(rng: random.Random, is_new: bool) -> tuple[int, int]:
    """(added, deleted) characters: new pages are large additions, most edits are small tweaks."""
    if is_new:
        return int(rng.lognormvariate(7.0, 1.0)), 0
    shape = rng.random()
    added = int(rng.lognormvariate(3.5, 1.6)) if shape < 0.75 else 0
    deleted = int(rng.lognormvariate(3.0, 1.6)) if shape > 0.55 else 0
    return added, deleted


def _timestamps(rng: random.Random, n: int) -> list[str]:
    """``n`` sorted ISO-8601 times (ms precision, ``Z``) on :data:`DAY`, following the hourly curve."""
    hours = rng.choices(range(24), weights=_HOURLY_TRAFFIC, k=n)
    millis = sorted(hour * 3_600_000 + rng.randrange(3_600_000) for hour in hours)
    return [
        f"{DAY}T{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}Z"
        for ms in millis
    ]


def generate(n: int, seed: int = 7) -> list[SampleRecord]:
    """Generate ``n`` sample records, time-ordered, deterministic for a given ``(n, seed)``.

    Exactly ``int(n * BAD_RECORD_RATE)`` records of each bad kind are placed at seeded positions:
    truncated JSON, an event without ``time``, and ``"time": "not-a-time"``.
    """
    rng = random.Random(seed)
    titles, users, ips = _vocabulary(rng)
    channels = rng.choices(_CHANNELS, cum_weights=_zipf_cum_weights(len(_CHANNELS), 1.1), k=n)
    pages = rng.choices(titles, cum_weights=_zipf_cum_weights(len(titles), 0.6), k=n)
    registered = rng.choices(users, cum_weights=_zipf_cum_weights(len(users), 0.8), k=n)
    bots = rng.choices(_BOTS, cum_weights=_zipf_cum_weights(len(_BOTS), 0.8), k=n)
    anonymous = rng.choices(ips, cum_weights=_zipf_cum_weights(len(ips), 0.7), k=n)
    geos = rng.choices(_GEO, cum_weights=_zipf_cum_weights(len(_GEO), 0.9), k=n)
    namespaces = rng.choices(list(_NAMESPACES), weights=list(_NAMESPACES.values()), k=n)
    times = _timestamps(rng, n)

    bad_per_kind = int(n * BAD_RECORD_RATE)
    bad_positions = rng.sample(range(n), bad_per_kind * len(_BAD_KINDS))
    bad_kind_at = {pos: _BAD_KINDS[i // bad_per_kind] for i, pos in enumerate(bad_positions)}

    records: list[SampleRecord] = []
    for i in range(n):
        editor = rng.random()
        is_robot, is_anonymous = editor < 0.15, editor >= 0.87
        user = bots[i] if is_robot else anonymous[i] if is_anonymous else registered[i]
        city, country_code, country = geos[i] if is_anonymous else (None, None, None)
        if city is not None and rng.random() < 0.3:  # geo-IP often resolves only the country
            city = None
        is_new = rng.random() < (0.25 if is_robot else 0.06)
        added, deleted = _edit_sizes(rng, is_new)
        namespace = namespaces[i]
        event: dict[str, Any] = {
            "time": times[i],
            "channel": f"#{channels[i]}.wikipedia",
            "cityName": city,
            "countryIsoCode": country_code,
            "countryName": country,
            "isAnonymous": is_anonymous,
            "isMinor": rng.random() < (0.5 if is_robot else 0.1 if is_anonymous else 0.3),
            "isNew": is_new,
            "isRobot": is_robot,
            "namespace": namespace,
            "page": pages[i] if namespace == "Main" else f"{namespace}:{pages[i]}",
            "user": user,
            "added": added,
            "deleted": deleted,
            "delta": added - deleted,
        }
        kind = bad_kind_at.get(i, "valid")
        if kind == "missing_time":
            del event["time"]
        elif kind == "bad_time":
            event["time"] = "not-a-time"
        text = _to_json(event)
        if kind == "malformed_json":
            text = text[: rng.randint(1, len(text) - 2)]  # a message cut off mid-write
        records.append(SampleRecord(text.encode("utf-8"), event if kind == "valid" else None, kind))
    return records


def generate_flat(n: int, dimensions: int = 8, seed: int = 7) -> list[SampleRecord]:
    """``n`` valid events of the shape ``../shared/benchmarks/diy_kafka_rollup.py`` expects: ``ts`` (ISO-8601 on
    :data:`DAY`, time-ordered), string dimensions ``d0``..``d{dimensions-1}``, ``m0`` long, ``m1`` and ``m2`` double.

    Dimension ``d<i>`` has 4 * 3**i values (4, 12, 36, ...), Zipf-skewed as the sample's, so that the rollup to
    the minute combines rows in the low dimensions and hardly in the high ones, as real event streams do.
    """
    rng = random.Random(seed)
    columns = []
    for i in range(dimensions):
        size = 4 * 3**i
        columns.append(rng.choices([f"d{i}-v{v}" for v in range(size)], cum_weights=_zipf_cum_weights(size, 0.9), k=n))
    records = []
    for row, ts in enumerate(_timestamps(rng, n)):
        event: dict[str, Any] = {"ts": ts, **{f"d{i}": column[row] for i, column in enumerate(columns)},
                                 "m0": rng.randrange(1000), "m1": round(rng.random() * 100, 3),
                                 "m2": round(rng.lognormvariate(2.0, 1.0), 3)}
        records.append(SampleRecord(_to_json(event).encode("utf-8"), event, "valid"))
    return records


def produce(bootstrap_servers: str, topic: str, records: Sequence[SampleRecord], partitions: int) -> dict[int, int]:
    """Write ``records`` round-robin over ``partitions`` (record ``i`` to partition ``i % partitions``).

    Returns the end offset (high watermark) of every partition afterwards. The bulk is sent with
    large batches for throughput; then each partition's last record is sent and flushed alone,
    because the dev broker reports the latest offset as "base offset of the last record batch + 1"
    (ARCHITECTURE.md §8): a one-record final batch makes that the true end.
    """
    failures: list[str] = []

    def on_delivery(error: Any, _message: Any) -> None:
        if error is not None:
            failures.append(error.str())

    producer = Producer({
        "bootstrap.servers": bootstrap_servers,
        "linger.ms": 50,
        "batch.num.messages": 100_000,
        "batch.size": 4 * 1024 * 1024,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1024 * 1024,
        "delivery.report.only.error": True,
        "on_delivery": on_delivery,
    })
    tails_from = max(len(records) - partitions, 0)  # the last record of each partition
    for first, last in ((0, tails_from), (tails_from, len(records))):
        for i in range(first, last):
            while True:
                try:
                    producer.produce(topic, records[i].value, partition=i % partitions)
                    break
                except BufferError:  # local queue full: let librdkafka drain it
                    producer.poll(0.1)
        if producer.flush(60.0):
            raise RuntimeError(f"producing to {topic!r}: messages still undelivered after 60s")
    if failures:
        raise RuntimeError(f"producing to {topic!r}: {len(failures)} messages failed, first: {failures[0]}")
    with KafkaStream({"bootstrap.servers": bootstrap_servers}, topic) as stream:
        return stream.latest_offsets(range(partitions))
