// A copy of the rules of spec/data/sensitive_paths.json (ids, kinds, patterns, exemptions, access;
// the human `reason` texts are left out). Keep it equal to the data file when the spec changes.

export const SENSITIVE_PATH_RULES = [
  {
    "id": "environment-file",
    "kind": "basename_glob",
    "patterns": [
      ".env",
      ".env.*"
    ],
    "exempt": [
      ".env.example",
      ".env.sample",
      ".env.template"
    ],
    "access": "write"
  },
  {
    "id": "credential-store",
    "kind": "basename_glob",
    "patterns": [
      "credentials.json",
      "auth.json",
      ".netrc",
      "_netrc",
      ".git-credentials",
      ".npmrc",
      ".pypirc",
      ".pgpass"
    ],
    "access": "write"
  },
  {
    "id": "credential-store-path",
    "kind": "path_suffix_glob",
    "patterns": [
      ".aws/credentials",
      ".docker/config.json",
      ".kube/config",
      ".config/gh/hosts.yml",
      ".config/gcloud/application_default_credentials.json"
    ],
    "access": "write"
  },
  {
    "id": "ssh-private-key",
    "kind": "basename_glob",
    "patterns": [
      "id_rsa",
      "id_dsa",
      "id_ecdsa",
      "id_ed25519",
      "id_ecdsa_sk",
      "id_ed25519_sk"
    ],
    "access": "write"
  },
  {
    "id": "ssh-directory",
    "kind": "path_suffix_glob",
    "patterns": [
      ".ssh/*"
    ],
    "access": "write"
  },
  {
    "id": "private-key-file",
    "kind": "basename_glob",
    "patterns": [
      "*.key",
      "key.pem",
      "privkey.pem",
      "*-key.pem",
      "*_key.pem",
      "*.p12",
      "*.pfx",
      "*.ppk",
      "*.jks",
      "*.keystore"
    ],
    "access": "write"
  },
  {
    "id": "gpg-private-key",
    "kind": "path_suffix_glob",
    "patterns": [
      ".gnupg/private-keys-v1.d/*",
      ".gnupg/secring.gpg"
    ],
    "access": "write"
  },
  {
    "id": "wuu-credential",
    "kind": "under_home",
    "home": "wuu",
    "patterns": [
      "auth.json",
      "credentials.json",
      "remote.json",
      "phone.json"
    ],
    "access": "read_write"
  }
];
