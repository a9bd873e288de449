"""Pydantic models whose errors `tests/validate_pydantic.rs` compares with formwork's.

Each model's `model_json_schema()` is committed as `schemas/NAME.json` (with the versions in
`schemas/VERSIONS`), and Pydantic's errors for every text of `cases.json` as
`pydantic_errors.json`. The texts are validated in JSON and strict mode,
`model_validate_json(text, strict=True)`: formwork checks a JSON text, and strict mode is the
one whose accepted set is the schema's (a string is never coerced to a number, a number
never to a string or a boolean).

    python models.py export          # rewrite schemas/ and pydantic_errors.json
    python models.py errors          # print {"versions", "schemas", "cases"} to stdout

The Rust test compares formwork's errors with `pydantic_errors.json` offline, and with
Python checks that the committed files are what this Pydantic says now.

Pydantic and email-validator are pinned in `grammar/tests/data/pydantic/requirements.txt`,
which `scripts/test` installs into `.venv-test`.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Literal, Optional, Union
from uuid import UUID

import pydantic
import pydantic_core
from pydantic import BaseModel, ConfigDict, Field


class Level(str, Enum):
    """An `Enum` class: exported as a `$defs` entry with `enum`, its errors typed `enum`."""

    low = "low"
    high = "high"


class Line(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sku: str = Field(pattern=r"^[A-Z]{3}-\d{3}$")
    qty: int = Field(ge=1, le=100)
    price: float = Field(gt=0)
    pack: int = Field(default=5, multiple_of=5)


class Order(BaseModel):
    """Scalars with every constraint Pydantic exports, lists, a dict, an Optional."""

    model_config = ConfigDict(extra="forbid")

    id: int
    customer: str = Field(min_length=2, max_length=10)
    paid: bool
    status: Literal["new", "shipped", "cancelled"]
    level: Level
    lines: list[Line] = Field(min_length=1, max_length=3)
    note: Optional[str] = None
    discount: float = Field(default=0, ge=0, lt=1)
    rating: int = Field(default=3, gt=0, le=5)
    tags: list[str] = Field(default=[], max_length=2)
    scores: dict[str, int] = {}
    single: Literal["only"] = "only"
    gift: Optional[Line] = None


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int = Field(ge=0, le=9)


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool


class Pets(BaseModel):
    """Unions: scalar ones (`anyOf` of types) and a discriminated one (`oneOf` on a tag)."""

    code: Union[int, str]
    maybe: Optional[int] = None
    size: Union[Literal["s", "m"], int] = "s"
    pet: Annotated[Union[Cat, Dog], Field(discriminator="kind")]
    others: list[Annotated[Union[Cat, Dog], Field(discriminator="kind")]] = []


class Dates(BaseModel):
    """String-typed scalars that JSON Schema checks with `format`."""

    day: dt.date
    at: dt.datetime
    id: UUID


class Mixed(BaseModel):
    """Smart unions: each member's errors under its own name."""

    a: Union[int, Annotated[str, Field(max_length=3)]] = 0
    b: Union[list[int], dict[str, int]] = []
    c: Union[Cat, Dog, None] = None
    d: Union[dt.date, int] = 0
    e: Optional[Union[int, str]] = None
    f: Union[Level, int] = 0


MODELS: dict[str, type[BaseModel]] = {
    "order": Order,
    "pets": Pets,
    "dates": Dates,
    "mixed": Mixed,
}

HERE = Path(__file__).resolve().parent


def versions() -> str:
    return f"pydantic {pydantic.VERSION}, pydantic-core {pydantic_core.__version__}"


def export() -> None:
    out = HERE / "schemas"
    out.mkdir(exist_ok=True)
    for name, model in MODELS.items():
        schema = model.model_json_schema()
        (out / f"{name}.json").write_text(json.dumps(schema, indent=2) + "\n")
    (out / "VERSIONS").write_text(versions() + "\n")
    cases = case_errors()
    lines = ",\n".join("  " + json.dumps(c, ensure_ascii=False) for c in cases)
    (HERE / "pydantic_errors.json").write_text("[\n" + lines + "\n]\n")


def case_errors() -> list[dict]:
    """Pydantic's `(loc, type, msg)` for every case, in its own order."""
    cases = json.loads((HERE / "cases.json").read_text(encoding="utf-8"))
    out = []
    for case in cases:
        model = MODELS[case["model"]]
        try:
            model.model_validate_json(case["text"], strict=True)
            errs = []
        except pydantic.ValidationError as e:
            errs = [
                {"loc": list(x["loc"]), "type": x["type"], "msg": x["msg"]}
                for x in e.errors(include_url=False)
            ]
        out.append({"name": case["name"], "errors": errs})
    return out


def errors() -> None:
    schemas = {name: model.model_json_schema() for name, model in MODELS.items()}
    print(json.dumps({"versions": versions(), "schemas": schemas, "cases": case_errors()}))


if __name__ == "__main__":
    if sys.argv[1:2] == ["export"]:
        export()
    elif sys.argv[1:] == ["errors"]:
        errors()
    else:
        print("usage: models.py export | errors", file=sys.stderr)
        sys.exit(2)
