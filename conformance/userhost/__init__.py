"""The user-host suite: cases, sessions and the requirement registry for any host serving the user-host RPC."""
