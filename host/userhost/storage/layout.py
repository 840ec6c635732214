"""Where the user host's bundled storage keeps one user space's data of one product domain, under the host's
home (spec/schema/userhost/initialize.schema.json): the host, its composition modules, the token commands and
the maintenance commands all find a space's folders here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class StorageLayout:
    """Where the bundled storage keeps one user space's data of one product domain."""

    root: Path
    """`<home>/user-spaces/<space>/<domain>`."""

    @property
    def state(self) -> Path:
        """Sessions, private plugin storage, memory and managed artifacts."""
        return self.root / "state"

    @property
    def files(self) -> Path:
        """Permitted user working files and explicit attachment working copies."""
        return self.root / "files"

    @property
    def directories(self) -> list[Path]:
        """The storage's directories from the home down: the home, `user-spaces`, the space's, the domain's
        (the root), then `state` and `files`."""
        return [*reversed(self.root.parents[:3]), self.root, self.state, self.files]

    @classmethod
    def under(cls, home: Path, user_space_id: str, product_domain: str) -> StorageLayout:
        return cls(home / "user-spaces" / user_space_id / product_domain)
