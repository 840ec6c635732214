"""The host side, in two halves that share the folder (import-linter keeps them apart):

- the execution environments (the modules below): profiles, backends and the `wuu-host adapter` bridge;
- the user host (`wuu.host.userhost`): one execution authority bound to a user space and product domain,
  served over the user-host RPC, with its storage and the `wuu-userhost` and `wuu` commands.

The environments import nothing of the user host. The user host imports them in one module only:
`wuu.host.userhost.personal.approvals.execution`, which runs approved Personal actions through an environment.

The execution environments:

- `profiles`: the `execution_environments` user configuration (spec/schema/config/
  execution_environments.schema.json): loading, validation reporting every error at once, selection, and
  each profile as its backend's typed model with the schema's defaults resolved.
- `errors`: the two families of refusals: `ProfileError` (the configuration is wrong) and
  `EnvironmentUnavailable` with its subclasses (the environment cannot be provisioned here).
- `backends`: `environment_for(profile)` and one module per backend: `local` and `command` (a child
  process, `base.ChildProcess`), `docker` (a container, through a Docker exec), `ssh` (a detached worker
  on a server, started by the package's `ssh_launcher.sh`), `apptainer` (`apptainer` and `singularity`:
  the runtime as a child process), `cloud` (`modal`, `daytona`, `vercel`: the host transport
  `cloud_transport.py`, a child process with the provider's SDK) and `kubernetes` (a pod, over the API
  server's attach stream).
- `adapter`: serves the v4 worker protocol on stdio through a profile's environment, relaying with
  `wuu.worker.relay` and one `initialize` interceptor (the environment's binding, the forwarded
  variables).
- `cli`: the `wuu-host` command line.

The worker protocol's client itself is `wuu.worker.client.WorkerClient`.
"""
