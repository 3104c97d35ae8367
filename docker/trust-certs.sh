#!/bin/sh
# Trusts the extra CA certificates copied to /usr/local/share/ca-certificates/podscope/ (a
# corporate proxy that re-signs TLS) for pip and Python, when there are any.
set -e
if ls /usr/local/share/ca-certificates/podscope/*.crt >/dev/null 2>&1; then
    if command -v update-ca-certificates >/dev/null; then
        update-ca-certificates >/dev/null
    else
        cat /usr/local/share/ca-certificates/podscope/*.crt >> /etc/ssl/certs/ca-certificates.crt
    fi
fi
