"""Pydantic models whose JSON Schemas are fixtures for `grammar/tests/compile_pydantic.rs`.

Run `python models.py export` to write `schemas/NAME.json` (one per model, from
`model_json_schema()`, and `schemas/VERSIONS`), `python models.py validate DIR` to check
the instances the Rust test wrote (`DIR/NAME.jsonl`, each line the instance text as a
JSON string) with `model_validate_json(..., strict=True)`. The committed schemas were
exported with the versions pinned in `requirements.txt` (pydantic 2.13.4,
email-validator 2.4.0), which `scripts/test` installs into `.venv-test`. The Rust tests
read the committed schemas without Python; only the round trip needs it.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Literal, Optional, Union
from uuid import UUID

import pydantic
import pydantic_core
from pydantic import BaseModel, ConfigDict, EmailStr, Field, RootModel

# A discriminated union on a `Literal` tag (`oneOf` + `discriminator` with `mapping`).
class Cat(BaseModel):
    kind: Literal["cat"]
    name: str
    lives: int = Field(ge=0, le=9)


class Dog(BaseModel):
    kind: Literal["dog"]
    name: str
    good_boy: bool


class Bird(BaseModel):
    # Two tags for one branch: the discriminator pins `kind` with `enum`.
    kind: Literal["bird", "parrot"]
    wingspan_cm: float = Field(gt=0)


Pet = Annotated[Union[Cat, Dog, Bird], Field(discriminator="kind")]


class Address(BaseModel):
    street: str
    city: str
    postcode: Optional[str] = None
    country: Literal["DE", "FR", "GB", "US"] = "DE"


class Owner(BaseModel):
    """Nested models, `Optional`, `Literal`, dicts, sets and the string-typed scalars."""

    id: UUID
    email: EmailStr
    name: str = Field(min_length=1, max_length=40)
    address: Address
    billing: Optional[Address] = None
    pets: list[Pet]
    favourite: Optional[Pet] = None
    scores: dict[str, int]
    tags: set[Literal["vip", "new", "banned"]]
    joined: dt.datetime
    birthday: Optional[dt.date] = None
    balance: Decimal
    status: Literal["active", "closed"]


class Node(BaseModel):
    """A recursive model (a tree)."""

    name: str
    weight: Optional[int] = None
    children: list[Node] = []


class Comment(BaseModel):
    """A recursive model through a discriminated union of two reply kinds."""

    model_config = ConfigDict(extra="forbid")

    author: EmailStr
    text: str
    posted: dt.datetime
    replies: list[Annotated[Union[Reply, Reaction], Field(discriminator="type")]] = []


class Reply(BaseModel):
    type: Literal["reply"]
    comment: Comment


class Reaction(BaseModel):
    # A tag with a default: not `required` in the schema, yet Pydantic needs it.
    type: Literal["reaction"] = "reaction"
    emoji: Literal["+1", "-1", "heart"]


class Event(RootModel[Annotated[Union[Cat, Dog, Bird], Field(discriminator="kind")]]):
    """A discriminated union at the root (the schema's root is `oneOf`)."""


class Shape(BaseModel):
    """A discriminated union without `mapping` pins (str tags, nested one level)."""

    shape: Annotated[
        Union[
            Annotated[Circle, pydantic.Tag("circle")],
            Annotated[Square, pydantic.Tag("square")],
        ],
        Field(discriminator="tag"),
    ]
    label: Optional[str] = None


class Circle(BaseModel):
    tag: Literal["circle"]
    r: float


class Square(BaseModel):
    tag: Literal["square"]
    side: int


class BlackCat(BaseModel):
    pet_type: Literal["cat"]
    color: Literal["black"]
    black_name: str


class WhiteCat(BaseModel):
    pet_type: Literal["cat"]
    color: Literal["white"]
    white_name: str


class Lizard(BaseModel):
    pet_type: Literal["reptile", "lizard"]
    scales: bool


class Pen(BaseModel):
    """Nested discriminated unions (Pydantic's docs): one branch is itself a union on
    another tag, and both of its models pin the outer tag to "cat"."""

    pet: Annotated[
        Union[Annotated[Union[BlackCat, WhiteCat], Field(discriminator="color")], Lizard],
        Field(discriminator="pet_type"),
    ]
    count: int = Field(ge=1)


class Ledger(BaseModel):
    """Lists of the string-typed scalars, so each round trip draws many of them."""

    emails: list[EmailStr] = Field(min_length=1)
    ids: list[UUID]
    at: list[dt.datetime]
    days: list[dt.date]
    amounts: list[Decimal]


Comment.model_rebuild()
Shape.model_rebuild()

MODELS: dict[str, type[BaseModel]] = {
    "owner": Owner,
    "node": Node,
    "comment": Comment,
    "event": Event,
    "shape": Shape,
    "pen": Pen,
    "ledger": Ledger,
}

HERE = Path(__file__).resolve().parent


def export() -> None:
    out = HERE / "schemas"
    out.mkdir(exist_ok=True)
    for name, model in MODELS.items():
        schema = model.model_json_schema()
        (out / f"{name}.json").write_text(json.dumps(schema, indent=2) + "\n")
    (out / "VERSIONS").write_text(
        f"pydantic {pydantic.VERSION}, pydantic-core {pydantic_core.__version__}\n"
    )


def validate(folder: Path) -> int:
    """Validates every instance; prints one line per model and per failure; 1 on any failure."""
    failed = 0
    total = 0
    for name, model in MODELS.items():
        path = folder / f"{name}.jsonl"
        if not path.exists():
            continue
        n = bad = 0
        # Not splitlines(): it also splits at U+2028, U+0085 and others inside strings.
        for line in path.read_text(encoding="utf-8").split("\n"):
            if not line:
                continue
            text = json.loads(line)  # each line is the instance text as a JSON string
            n += 1
            try:
                model.model_validate_json(text, strict=True)
            except pydantic.ValidationError as e:
                bad += 1
                errs = "; ".join(
                    f"{'/'.join(map(str, x['loc']))}: {x['type']}: {x['msg']}" for x in e.errors()
                )
                if bad <= 10:
                    print(f"FAIL {name}: {text}\n  {errs}")
        print(f"{name}: {n - bad} of {n} valid")
        total += n
        failed += bad
    print(f"pydantic strict: {total - failed} of {total} valid")
    return 1 if failed else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["export"]:
        export()
    elif sys.argv[1:2] == ["validate"] and len(sys.argv) == 3:
        sys.exit(validate(Path(sys.argv[2])))
    else:
        print("usage: models.py export | validate DIR", file=sys.stderr)
        sys.exit(2)
