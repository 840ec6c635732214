"""The Personal plugin (`wuu.personal`) and its durable store: the main conversation, input receipts,
attachments, history and search, and reactions (spec/schema/userhost/personal.schema.json,
spec/schema/receipts/).

`personal()` is the composition module an embedding (or `wuu-userhost serve --composition-profile
personal`) adds to a host; `SessionDomain` is the provider interface a replacement store implements.
"""

from .agent import Agent, AgentStep, ModelContext, StandInAgent
from .composition import personal, sqlite_provider
from .plugin import FINGERPRINT, PLUGIN_ID, PersonalPlugin
from .provider import ContextMessage, ReactionChange, SessionDomain
from .sqlite.schema import StoreVersionError
from .sqlite.sessions import StoreError
from .sqlite.store import SqliteSessionDomain

__all__ = [
    "FINGERPRINT",
    "PLUGIN_ID",
    "Agent",
    "AgentStep",
    "ContextMessage",
    "ModelContext",
    "PersonalPlugin",
    "ReactionChange",
    "SessionDomain",
    "SqliteSessionDomain",
    "StandInAgent",
    "StoreError",
    "StoreVersionError",
    "personal",
    "sqlite_provider",
]
