"""The Personal plugin's methods on the grants of background tasks (spec/schema/userhost/tasks.schema.json):
the owner reads them and revokes one."""

from __future__ import annotations

from wuu.generated.models import (
    TasksGrantsListParams,
    TasksGrantsListResult,
    TasksGrantsRevokeParams,
    TasksGrantsRevokeResult,
    UserHostErrorCode,
)

from ..errors import UserHostError
from ..plugins import PluginCall
from .task_runner import TaskGrants, TaskRunner


class GrantMethods:
    """The plugin's grant methods; the plugin gives them its grants and task runner."""

    grants: TaskGrants
    runner: TaskRunner

    async def tasks_grants_list(
        self, params: TasksGrantsListParams, call: PluginCall
    ) -> TasksGrantsListResult:
        return TasksGrantsListResult(grants=await self.grants.grants())

    async def tasks_grants_revoke(
        self, params: TasksGrantsRevokeParams, call: PluginCall
    ) -> TasksGrantsRevokeResult:
        # Revoking only takes authority away, so any owner connection may do it; closing one revokes nothing.
        grant = await self.grants.revoke(params.grant_id)
        if grant is None:
            raise UserHostError(UserHostErrorCode.NOT_FOUND, f"no grant {params.grant_id}", "params.grant_id")
        self.runner.wake()  # the task's unclaimed effects now fail their check
        return TasksGrantsRevokeResult(grant=grant)
