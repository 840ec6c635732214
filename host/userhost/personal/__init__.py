"""The Personal plugin (`wuu.personal`) and its durable store: the main conversation, input receipts,
attachments, history and search, reactions, and actions under approval (spec/schema/userhost/personal.schema.json,
approvals.schema.json, spec/schema/receipts/).

`personal()` is the composition module an embedding (or `wuu-userhost serve --composition-profile
personal`) adds to a host; `SessionDomain` is the provider interface a replacement store implements.

The names below load on first use (PEP 562): the store's writer process imports the store's write modules
beneath this package, and nothing else of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wuu.worker.lazy_names import loader

if TYPE_CHECKING:
    from .agent import Agent, AgentStep, ModelContext
    from .authorization import AuthorizationProvider
    from .composition import (
        AUTHORIZATION_PROVIDERS,
        SESSION_DOMAIN_PROVIDERS,
        AuthorizationChoice,
        native_authorization,
        no_authorization,
        personal,
        sqlite_provider,
    )
    from .model import ModelAdapter, ModelConfig, OpenAIChatModel, StandInModel
    from .model_agent import ModelAgent
    from .plugin import FINGERPRINT, PLUGIN_ID, PersonalPlugin
    from .provider import ContextMessage, ReactionChange, SessionDomain
    from .sqlite.schema import StoreVersionError
    from .sqlite.sessions import StoreError
    from .sqlite.store import SqliteSessionDomain

_MODULE_OF = {
    "AUTHORIZATION_PROVIDERS": "composition",
    "Agent": "agent",
    "AgentStep": "agent",
    "AuthorizationChoice": "composition",
    "AuthorizationProvider": "authorization",
    "ContextMessage": "provider",
    "FINGERPRINT": "plugin",
    "ModelAdapter": "model",
    "ModelAgent": "model_agent",
    "ModelConfig": "model",
    "ModelContext": "agent",
    "OpenAIChatModel": "model",
    "PLUGIN_ID": "plugin",
    "PersonalPlugin": "plugin",
    "ReactionChange": "provider",
    "SESSION_DOMAIN_PROVIDERS": "composition",
    "SessionDomain": "provider",
    "SqliteSessionDomain": "sqlite.store",
    "StandInModel": "model",
    "StoreError": "sqlite.sessions",
    "StoreVersionError": "sqlite.schema",
    "native_authorization": "composition",
    "no_authorization": "composition",
    "personal": "composition",
    "sqlite_provider": "composition",
}

__all__ = [
    "AUTHORIZATION_PROVIDERS",
    "FINGERPRINT",
    "PLUGIN_ID",
    "SESSION_DOMAIN_PROVIDERS",
    "Agent",
    "AgentStep",
    "AuthorizationChoice",
    "AuthorizationProvider",
    "ContextMessage",
    "ModelAdapter",
    "ModelAgent",
    "ModelConfig",
    "ModelContext",
    "OpenAIChatModel",
    "PersonalPlugin",
    "ReactionChange",
    "SessionDomain",
    "SqliteSessionDomain",
    "StandInModel",
    "StoreError",
    "StoreVersionError",
    "native_authorization",
    "no_authorization",
    "personal",
    "sqlite_provider",
]


__getattr__ = loader(__name__, _MODULE_OF)
