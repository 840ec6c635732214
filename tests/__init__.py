"""The test suite. Its layout mirrors the packages: spec/, worker/, host/, conformance/, tools/."""
