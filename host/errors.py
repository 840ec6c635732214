"""Why the host cannot serve a profile: two families, told apart by what the user has to change.

- `ProfileError`: the configuration is wrong (the file, a profile, a field, or the host's environment
  that the profile names, such as a `forward_env` variable). Fix the configuration.
- `EnvironmentUnavailable`: the profile is valid, but its environment cannot be provisioned here: the
  backend is not served by this installation, its engine or server is unreachable, an image is missing,
  a host key is not verified. Fix the machine (or wait for it). Each backend has its subclass.

`wuu-host` reports either with exit status 2, before any worker runs.
"""

from __future__ import annotations


class ProfileError(Exception):
    """The configuration is wrong; each line of the message says where (file, profile, field) and why."""


class EnvironmentUnavailable(Exception):
    """The profile's environment cannot be provisioned; the message names the profile and what failed."""


class BackendUnavailable(EnvironmentUnavailable):
    """This installation does not serve the profile's backend (or one of its settings), or lacks its SDK."""


class DockerUnavailable(EnvironmentUnavailable):
    """No Docker engine, no image, an engine this backend cannot reach, or a container that did not start."""


class SshUnavailable(EnvironmentUnavailable):
    """The profile's server cannot be used: unreachable, its host key not verified, login or setup refused."""
