// The parameter shapes of the v4 worker methods and core tools, transcribed by hand from
// spec/schema/worker/*.schema.json (every object is closed; defaults are applied by the callers).

import { arrayOf, bool, enumOf, int, INT32_MAX, INT64_MAX, object, str, stringMap } from './validate.mjs';

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const TOOL_NAME = /^[a-z][a-z0-9_]*$/;

const nonEmpty = () => str({ minLength: 1 });
const frameId = () => str({ minLength: 1, maxUtf8: 256 });
const permissionMode = () => enumOf(['standard', 'read_only', 'unconfined']);
const envMap = () => stringMap(ENV_NAME);
// A command's arguments, working directory and environment values hold no NUL byte.
const NO_NUL = /^[^\u0000]*$/;
const commandArgv = () => arrayOf(str({ pattern: NO_NUL }), { minItems: 1 });
const commandCwd = () => str({ minLength: 1, pattern: NO_NUL });
const commandEnv = () => stringMap(ENV_NAME, NO_NUL);
// A search glob holds no `[`, `]`, `\` or NUL; a search_content filter may start with one `!`.
const SEARCH_GLOB = /^[^[\]\\\u0000]+$/;
const SEARCH_GLOB_FILTER = /^!?[^![\]\\\u0000][^[\]\\\u0000]*$/;

export const InitializeParams = object(
  {
    version: int(0, INT32_MAX),
    root: str({ minLength: 1, pattern: /^\// }),
    session: nonEmpty(),
    identity: stringMap(),
    environment: envMap(),
    require_existing_workspace: bool(),
    remove_workspace_on_exit: bool(),
    capabilities: arrayOf(nonEmpty(), { unique: true }),
    file_roots: arrayOf(
      object(
        {
          path: str({ minLength: 1, pattern: /^\// }),
          kind: enumOf(['scoped_home', 'wuu_home', 'workspace', 'temporary']),
        },
        ['path', 'kind'],
      ),
    ),
    command_network: enumOf(['unrestricted', 'no_tcp']),
  },
  ['version', 'root', 'session'],
);

export const CancelParams = object({ id: frameId() }, ['id']);

export const ExecutionToolRequestV4 = object(
  {
    tool: str({ pattern: TOOL_NAME }),
    call: object({ id: nonEmpty(), arguments: str() }, ['id', 'arguments']),
    actor: object({ kind: enumOf(['agent', 'user', 'plugin', 'system']), id: nonEmpty() }, ['kind', 'id']),
    permission_mode: permissionMode(),
  },
  ['tool', 'call', 'actor', 'permission_mode'],
);

export const ToolArguments = {
  read_file: object(
    {
      path: nonEmpty(),
      offset_bytes: int(0, INT64_MAX),
      max_bytes: int(1, 8388608),
    },
    ['path'],
  ),
  write_file: object({ path: nonEmpty(), content: str(), create_dirs: bool() }, ['path', 'content']),
  edit_file: object(
    {
      path: nonEmpty(),
      old_string: nonEmpty(),
      new_string: str(),
      replace_all: bool(),
    },
    ['path', 'old_string', 'new_string'],
  ),
  list_dir: object({ path: nonEmpty(), depth: int(1, 64), include_hidden: bool() }, ['path']),
  search_content: object(
    {
      pattern: str({ minLength: 1, maxLength: 4096, pattern: /^[^\u0000\n\r]*$/ }),
      path: nonEmpty(),
      globs: arrayOf(str({ minLength: 1, maxLength: 257, pattern: SEARCH_GLOB_FILTER }), { maxItems: 32 }),
      literal: bool(),
      case_sensitive: bool(),
      include_hidden: bool(),
      max_results: int(1, 1000),
    },
    ['pattern'],
  ),
  search_files: object(
    {
      pattern: str({ minLength: 1, maxLength: 256, pattern: SEARCH_GLOB }),
      path: nonEmpty(),
      include_hidden: bool(),
      max_results: int(1, 5000),
    },
    ['pattern'],
  ),
  exec_command: object(
    {
      argv: commandArgv(),
      cwd: commandCwd(),
      env: commandEnv(),
      timeout_ms: int(1, INT32_MAX),
    },
    ['argv'],
  ),
};

export const ProcessStartParams = object(
  {
    operation_id: nonEmpty(),
    argv: commandArgv(),
    cwd: commandCwd(),
    env: commandEnv(),
    permission_mode: permissionMode(),
    stdin: bool(),
    timeout_ms: int(1, INT32_MAX),
    output_retention_bytes: int(1048576, 67108864), // min_retained_output_bytes..max_output_retention_bytes
    output_flow: enumOf(['drop_oldest', 'wait_for_reader']),
  },
  ['argv', 'permission_mode'],
);

export const ProcessListParams = object({}, []);
export const ProcessGetParams = object({ id: nonEmpty() }, ['id']);

export const ProcessStopParams = object(
  {
    id: nonEmpty(),
    signal: enumOf(['TERM', 'KILL']),
    grace_ms: int(0, INT32_MAX),
  },
  ['id'],
);

export const ProcessWriteParams = object({ id: nonEmpty(), data: str(), close: bool() }, ['id', 'data']);

export const ProcessReadParams = object(
  {
    Process: nonEmpty(),
    MaxBytes: int(1, 8388608),
    OffsetBytes: int(0, INT64_MAX),
    Wait: int(0, INT64_MAX),
    MinDwell: int(0, INT64_MAX),
  },
  ['Process'],
);

export const ExportOpenParams = object({ path: nonEmpty() }, ['path']);
export const ExportReadParams = object(
  {
    token: nonEmpty(),
    offset: int(0, INT64_MAX),
    max_bytes: int(1, 8388608),
  },
  ['token', 'offset'],
);
export const ExportCloseParams = object({ token: nonEmpty() }, ['token']);
