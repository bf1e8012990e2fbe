import hashlib
import os


def handle(event):
    """Proves it has its secrets without showing them: the token's length and a digest of the
    certificate file, never the values."""
    token = os.environ.get("API_TOKEN", "")
    with open("/var/run/secrets/tls/cert", "rb") as f:
        cert = f.read()
    return {"token_length": len(token), "cert_sha256": hashlib.sha256(cert).hexdigest()}
