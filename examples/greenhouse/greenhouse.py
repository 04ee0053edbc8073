"""Offline fake greenhouse controller: the tools of ``examples/greenhouse/bundle.yaml``.

Nothing here talks to hardware or the network: readings are derived deterministically from the arguments, and
the log, climate targets, harvests and seed orders live in memory for the life of the process. The bundle
exists to show ``agentkit specialize`` on tools that the embedded checkpoint never saw in training.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Annotated, Any, Literal

from pydantic import Field

Bed = Annotated[
    str,
    Field(
        pattern=r"^[A-H][1-9]$",
        description="Bed label: a row letter A-H and a number 1-9, e.g. 'C4'.",
        examples=["C4", "A1", "H9", "E2"],
    ),
]
Zone = Literal["north", "south", "propagation", "tropical"]
Sensor = Literal["soil_moisture", "temperature", "light", "ph"]
Supplier = Literal["greenleaf", "seedhaus", "northfield"]

_WATERING: list[dict[str, Any]] = []
_CLIMATE: dict[str, dict[str, Any]] = {}
_HARVESTS: list[dict[str, Any]] = []
_ORDERS: list[dict[str, Any]] = []


def _unit(*parts: Any) -> float:
    """A deterministic number in [0, 1) from the arguments (stands in for a sensor)."""
    h = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(h[:4], "big") / 2**32


def log_watering(
    bed: Bed,
    liters: Annotated[float, Field(gt=0, le=200, description="Water given, in liters.", examples=[2.5, 12])],
) -> dict[str, Any]:
    """Record that a bed was watered.

    Args:
        bed: Bed label, e.g. 'C4'.
        liters: Water given, in liters.
    """
    entry = {"bed": bed, "liters": liters, "entry": len(_WATERING) + 1}
    _WATERING.append(entry)
    return {
        "logged": True,
        **entry,
        "total_today_liters": sum(e["liters"] for e in _WATERING if e["bed"] == bed),
    }


def set_climate(
    zone: Annotated[Zone, Field(description="Greenhouse zone.")],
    target_celsius: Annotated[int, Field(ge=5, le=40, description="Target air temperature in °C.")],
    humidity_percent: Annotated[
        int | None, Field(ge=20, le=100, description="Target relative humidity in percent.")
    ] = None,
) -> dict[str, Any]:
    """Set the heating and misting targets of a greenhouse zone.

    Args:
        zone: Greenhouse zone.
        target_celsius: Target air temperature in °C.
        humidity_percent: Target relative humidity in percent (unchanged when omitted).
    """
    now = _CLIMATE.setdefault(zone, {"target_celsius": 20, "humidity_percent": 60})
    now["target_celsius"] = target_celsius
    if humidity_percent is not None:
        now["humidity_percent"] = humidity_percent
    return {"zone": zone, **now}


def schedule_harvest(
    crop: Annotated[
        str,
        Field(min_length=2, description="What to harvest.", examples=["basil", "cherry tomatoes", "kale"]),
    ],
    bed: Bed,
    date: Annotated[dt.date, Field(description="Harvest day (YYYY-MM-DD).")],
) -> dict[str, Any]:
    """Put a harvest on the schedule.

    Args:
        crop: What to harvest.
        bed: Bed label, e.g. 'C4'.
        date: Harvest day (YYYY-MM-DD).
    """
    item = {"id": f"H-{len(_HARVESTS) + 101}", "crop": crop, "bed": bed, "date": date.isoformat()}
    _HARVESTS.append(item)
    return {"scheduled": True, **item}


def get_sensor_reading(
    bed: Bed, sensor: Annotated[Sensor, Field(description="Which sensor to read.")]
) -> dict[str, Any]:
    """Read one sensor of a bed.

    Args:
        bed: Bed label, e.g. 'C4'.
        sensor: Which sensor to read.
    """
    u = _unit(bed, sensor)
    value, unit = {
        "soil_moisture": (round(15 + 40 * u, 1), "%"),
        "temperature": (round(14 + 14 * u, 1), "°C"),
        "light": (round(2000 + 30000 * u), "lux"),
        "ph": (round(5.5 + 2 * u, 2), "pH"),
    }[sensor]
    return {"bed": bed, "sensor": sensor, "value": value, "unit": unit}


def order_seeds(
    variety: Annotated[
        str,
        Field(
            min_length=2, description="Seed variety.", examples=["Genovese basil", "Sungold", "Lacinato kale"]
        ),
    ],
    packets: Annotated[int, Field(ge=1, le=50, description="Number of seed packets.")],
    supplier: Annotated[Supplier | None, Field(description="Supplier to order from.")] = None,
) -> dict[str, Any]:
    """Order seed packets.

    Args:
        variety: Seed variety.
        packets: Number of seed packets.
        supplier: Supplier to order from (the cheapest when omitted).
    """
    order = {
        "order": f"S-{len(_ORDERS) + 501}",
        "variety": variety,
        "packets": packets,
        "supplier": supplier or "greenleaf",
        "price_eur": round(packets * (2.2 + _unit(variety)), 2),
    }
    _ORDERS.append(order)
    return order
