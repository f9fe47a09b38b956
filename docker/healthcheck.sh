#!/bin/bash
# healthcheck.sh — the image's HEALTHCHECK: GET /healthz over bash's /dev/tcp (no curl in the
# image). Port from ATTND_LISTEN (host:port), default 8080. Exit 0 only on an HTTP 200.
set -u
port=${ATTND_LISTEN:-0.0.0.0:8080}
port=${port##*:}
exec 3<>"/dev/tcp/127.0.0.1/${port}" || exit 1
printf 'GET /healthz HTTP/1.0\r\nHost: localhost\r\nConnection: close\r\n\r\n' >&3
IFS= read -r -t 2 status <&3 || exit 1
case "$status" in
    "HTTP/1."[01]" 200 "*) exit 0 ;;
    *) exit 1 ;;
esac
