"""A method's params decoded strictly against their pydantic model: the user host's check of what it receives
(a worker decodes its params with their plain twins, `plain`, which hold the same rules).

Strict (spec/README.md, "Scalars"): a string `"1"` where an integer belongs is refused, and so is `4.0`. The
user host answers a failure with `invalid_params`, from what `InvalidParams` says: what is wrong, and where.
"""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
from pydantic import ValidationError

from .wire import WireModel

M = TypeVar("M", bound=WireModel)


class InvalidParams(Exception):
    """Params that are not their model's.

    `message` says what is wrong. `location` is the dotted path of the model's first error ("" for the params
    as a whole), or None when the params cannot even be encoded (nested deeper than orjson writes, 254 levels,
    which is below the depth it reads, 1024).
    """

    def __init__(self, model: type[WireModel], params: Any, message: str, location: str | None) -> None:
        super().__init__(f"{location or model.__name__}: {message}")
        self.model = model
        self.params = params
        self.message = message
        self.location = location

    def field(self) -> str:
        """The offending field as the spec's schema names it ("" for the params as a whole).

        The model's location may also name the branch of a union (`id.constrained-str`); the def's validator
        names the field itself, so its location wins where it finds the error.
        """
        from .validators import error_locations, errors  # jsonschema is slow to import; failures are rare

        found = errors(self.model.__name__, self.params)
        if found:
            return min(error_locations(found[:1]), key=lambda where: (-len(where), where))
        return self.location or ""


def parse_params(model: type[M], params: Any) -> M:
    """`params` (decoded JSON) as `model`, validated strictly; `InvalidParams` when they are not its."""
    try:
        encoded = orjson.dumps(params)
    except orjson.JSONEncodeError as error:
        raise InvalidParams(model, params, str(error), None) from None
    try:
        return model.model_validate_json(encoded, strict=True)
    except ValidationError as error:
        first = error.errors()[0]
        location = ".".join(str(part) for part in first["loc"])
        raise InvalidParams(model, params, first["msg"], location) from None
