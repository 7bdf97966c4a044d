"""The peers' race's ratios (:mod:`cdc.bench.peers_race` runs it, :mod:`cdc.bench.peers_report`
renders it): ours over a peer's rates, the peer's peak RSS over ours, the pairs the headline
compares and the goals they are held to (issue 55)."""

from __future__ import annotations

from typing import Any

from cdc.bench.debezium import ratio

#: The peers that can race, and the names of the runs: ours, Debezium in Kafka Connect.
PEERS = ("connect", "flink")
OURS = "ours"
CONNECT = "connect"


def pair_ratios(ours: dict[str, Any], peer: dict[str, Any], name: str, ours_name: str = OURS) -> dict[str, float | None]:
    """Ours over the peer's rates (after the warm-up, from the first record, including the
    start-up or from the signal), the peer's peak RSS over ours."""
    out = {f"{ours_name}/{name}_after_warmup": ratio(ours.get("rows_per_s_after_warmup"),
                                                         peer.get("rows_per_s_after_warmup")),
           f"{ours_name}/{name}_from_first": ratio(ours.get("rows_per_s_from_first"),
                                                       peer.get("rows_per_s_from_first")),
           f"rss {name}/{ours_name}": ratio(peer.get("rss_peak_mb"), ours.get("rss_peak_mb"))}
    if "rows_per_s_from_signal" in ours and "rows_per_s_from_signal" in peer:
        out[f"{ours_name}/{name}_from_signal"] = ratio(ours["rows_per_s_from_signal"],
                                                           peer["rows_per_s_from_signal"])
    elif "rows_per_s_total" in peer:
        ours_total = ours.get("rows_per_s_from_signal") or ours.get("rows_per_s_total")
        out[f"{ours_name}/{name}_total"] = ratio(ours_total, peer["rows_per_s_total"])
    return out


def headline_pairs(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """``(workload key, ours run, peer run, label)`` of every pair that ran."""
    out = []
    for key in ("streaming", "single_row"):
        if key in result and CONNECT in result[key]:
            out.append((key, OURS, CONNECT, result[key].get("label", key)))
    snap = result.get("snapshot") or {}
    if CONNECT in snap:
        out.append(("snapshot", "ours_p1", CONNECT, "incremental snapshot"))
    for p in result.get("parallelisms") or ():
        if f"flink_p{p}" in snap:
            out.append(("snapshot", f"ours_p{p}", f"flink_p{p}", f"snapshot, parallelism {p}"))
    return out


#: The goals of issue 55: ours over the peer (rows/s after the warm-up), the peer's peak RSS over ours.
GOALS = {"streaming": 3.0, "single_row": 2.0, "snapshot": 3.0, "flink": 2.0, "rss": 10.0}


def goal(key: str, peer: str) -> float:
    """The goal of workload ``key``'s ratio against ``peer``'s run."""
    return GOALS["flink"] if peer.startswith("flink_p") else GOALS[key]
