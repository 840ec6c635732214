// A copy of the rules of spec/data/redaction_rules.json (ids, patterns, case folding; the human
// `description` texts are left out). Keep it equal to the data file when the spec changes.

export const REDACTION_RULES = [
  {
    "id": "private-key-block",
    "pattern": "-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:[\\s\\S]*?-----END [A-Z0-9 ]*PRIVATE KEY-----|[\\s\\S]*)"
  },
  {
    "id": "aws-access-key-id",
    "pattern": "\\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\\b"
  },
  {
    "id": "github-token",
    "pattern": "\\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\\b"
  },
  {
    "id": "gitlab-token",
    "pattern": "\\bgl(?:pat|dt|ptt|rt|oas|cbt|imt|ft|sa)-[A-Za-z0-9_-]{20,}"
  },
  {
    "id": "slack-token",
    "pattern": "\\bxox[abposre]-[A-Za-z0-9-]{10,}"
  },
  {
    "id": "slack-webhook",
    "pattern": "https://hooks\\.slack\\.com/services/[A-Za-z0-9/]{20,}"
  },
  {
    "id": "stripe-key",
    "pattern": "\\b[rs]k_live_[A-Za-z0-9]{16,}"
  },
  {
    "id": "google-api-key",
    "pattern": "\\bAIza[0-9A-Za-z_-]{35}"
  },
  {
    "id": "openai-key",
    "pattern": "\\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"
  },
  {
    "id": "jwt",
    "pattern": "\\beyJ[A-Za-z0-9_-]{8,}\\.eyJ[A-Za-z0-9_-]{8,}\\.[A-Za-z0-9_-]{8,}"
  },
  {
    "id": "bearer-token",
    "pattern": "\\bbearer\\s+([A-Za-z0-9._~+/-]{16,}=*)",
    "case_insensitive": true
  },
  {
    "id": "url-credentials",
    "pattern": "\\b[a-z][a-z0-9+.-]*://[^/\\s:@\\[\\]]+:([^/\\s@\\[\\]]+)@",
    "case_insensitive": true
  },
  {
    "id": "secret-assignment",
    "pattern": "(?:password|passwd|pwd|passphrase|secret|secret[_-]?key|client[_-]?secret|api[_-]?key|apikey|access[_-]?key|auth[_-]?token|access[_-]?token|token)[\\\"']?\\s*(?::|=|:=|=>)\\s*(?:\\\"([^\\\"\\n\\[][^\\\"\\n]{5,})\\\"|'([^'\\n\\[][^'\\n]{5,})'|([^\\s\\\"'`,;\\[][^\\s\\\"'`,;]{5,}))",
    "case_insensitive": true
  }
];
