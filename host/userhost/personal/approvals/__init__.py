"""Personal actions under approval (spec/schema/userhost/approvals.schema.json): the agent's file changes,
commands and process input become cards that the owner, a rule or the automatic review decides, and that run
through an execution environment once approved.

`files` inspects where a file action would land in the Personal files root and whether it still would;
`execution` runs an approved action through a worker of the configured execution environment.
"""
