#!/bin/sh
# compose/secret.sh: the JWT secret of the compose deployment (compose.yaml), made at
# its first start and kept in the secrets volume, so that no secret ships with the
# repository. It never prints the secret.
#
#   sh secret.sh init          makes the secret file unless it holds one: 32 random bytes
#                              from /dev/urandom, in hex. Run as root (a new volume is
#                              root's), it gives the file to $STEPGATE_SECRET_OWNER,
#                              10001 (the image's user) by default.
#   sh secret.sh run CMD ARG…  runs CMD with STEPGATE_JWT_SECRET read from the file.
#
# The file is $STEPGATE_SECRET_FILE, /secrets/jwt_secret by default. A new secret
# makes every token signed with the old one invalid: `docker compose down -v` does.
set -eu

file="${STEPGATE_SECRET_FILE:-/secrets/jwt_secret}"

case "${1:-}" in
init)
	if [ -s "$file" ]; then
		echo "secret.sh: keeping the JWT secret in $file"
		exit 0
	fi
	umask 077
	secret="$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')"
	if [ "${#secret}" -ne 64 ]; then
		echo "secret.sh: could not read 32 random bytes from /dev/urandom" >&2
		exit 1
	fi
	# Written aside and moved in, so that no reader sees half a secret.
	tmp="$file.new.$$"
	printf '%s\n' "$secret" >"$tmp"
	if [ "$(id -u)" = 0 ]; then
		chown "${STEPGATE_SECRET_OWNER:-10001}" "$tmp"
	fi
	mv -f "$tmp" "$file"
	echo "secret.sh: made a new JWT secret in $file"
	;;
run)
	shift
	if [ "$#" -eq 0 ]; then
		echo "usage: secret.sh run COMMAND [ARG...]" >&2
		exit 2
	fi
	if [ ! -s "$file" ]; then
		echo "secret.sh: no JWT secret in $file: the secrets service makes it at the first start (docker compose up)" >&2
		exit 1
	fi
	STEPGATE_JWT_SECRET="$(cat "$file")"
	export STEPGATE_JWT_SECRET
	exec "$@"
	;;
*)
	echo "usage: secret.sh init | secret.sh run COMMAND [ARG...]" >&2
	exit 2
	;;
esac
