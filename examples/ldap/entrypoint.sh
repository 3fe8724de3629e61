#!/bin/sh
# OpenLDAP for Strongroom's examples: writes slapd.conf, loads seed.ldif and the Strongroom bind account into an
# empty database, then runs slapd in the foreground (it stops cleanly on SIGTERM). The same Debian slapd as the
# test harness; test/container/ runs it in its image, test/support/example-directory.ts with the machine's slapd.
#
#   LDAP_BIND_PASSWORD_FILE  file holding the bind account's password (or LDAP_BIND_PASSWORD, the value itself)
#   LDAP_PORT                plain LDAP port, default 1389 (above 1024: slapd runs as a user without privileges)
#   LDAP_HOST                the address slapd listens on, default 0.0.0.0 (every interface, as a container needs);
#                            127.0.0.1 for a directory on your own machine (README's walkthrough)
#   LDAP_STATE_DIR           slapd.conf and the database, default /var/lib/strongroom-ldap (a volume)
#   LDAP_SEED                the LDIF loaded into an empty database, default the image's seed.ldif
#   LDAP_SCHEMA_DIR          OpenLDAP's schema files, default /etc/ldap/schema (Debian's)
#   LDAP_MODULE_DIR          slapd's modules (back_mdb), default /usr/lib/ldap (Debian's)
set -eu

state="${LDAP_STATE_DIR:-/var/lib/strongroom-ldap}"
port="${LDAP_PORT:-1389}"
host="${LDAP_HOST:-0.0.0.0}"
seed="${LDAP_SEED:-/etc/strongroom-ldap/seed.ldif}"
schema_dir="${LDAP_SCHEMA_DIR:-/etc/ldap/schema}"
module_dir="${LDAP_MODULE_DIR:-/usr/lib/ldap}"
suffix="dc=example,dc=org"
bind_dn="cn=strongroom,ou=system,$suffix"
engines="cn=strongroom-engines,ou=groups,$suffix"

fail() {
  echo "strongroom-ldap: $*" >&2
  exit 2
}

umask 077
mkdir -p "$state/data"

# Only the Strongroom account (a member of strongroom-engines) may set passwords and add or delete entries;
# anyone may bind, users may read the tree. There is no rootdn: the database is loaded offline by slapadd.
cat >"$state/slapd.conf" <<EOF
include $schema_dir/core.schema
include $schema_dir/cosine.schema
include $schema_dir/inetorgperson.schema
include $schema_dir/nis.schema
pidfile $state/slapd.pid
argsfile $state/slapd.args
modulepath $module_dir
moduleload back_mdb
database mdb
maxsize 104857600
suffix "$suffix"
directory $state/data
index objectClass eq
index cn,uid,member eq
access to attrs=userPassword
  by group/groupOfNames/member.exact="$engines" manage
  by self write
  by anonymous auth
  by * none
access to *
  by group/groupOfNames/member.exact="$engines" manage
  by users read
  by * none
EOF

if [ ! -e "$state/data/data.mdb" ]; then
  if [ -n "${LDAP_BIND_PASSWORD_FILE:-}" ]; then
    [ -r "$LDAP_BIND_PASSWORD_FILE" ] || fail "LDAP_BIND_PASSWORD_FILE $LDAP_BIND_PASSWORD_FILE cannot be read"
    password="$(cat "$LDAP_BIND_PASSWORD_FILE")"
  else
    password="${LDAP_BIND_PASSWORD:-}"
  fi
  [ -n "$password" ] || fail "set LDAP_BIND_PASSWORD_FILE or LDAP_BIND_PASSWORD: the Strongroom bind account needs a password"
  # Hashed from a file, so the password never appears in a process's arguments; removed even if hashing fails.
  plain="$state/.bind-password"
  trap 'rm -f "$plain"' EXIT
  printf '%s' "$password" >"$plain"
  hash="$(slappasswd -T "$plain")"
  rm -f "$plain"
  trap - EXIT
  # A load that fails leaves no database behind: the next start loads again instead of serving a partial tree.
  { cat "$seed"; printf '\ndn: %s\nobjectClass: inetOrgPerson\ncn: strongroom\nsn: strongroom\nuserPassword: %s\n' "$bind_dn" "$hash"; } |
    slapadd -q -f "$state/slapd.conf" || { rm -f "$state/data/data.mdb" "$state/data/lock.mdb"; fail "$seed and $bind_dn could not be loaded"; }
  echo "strongroom-ldap: loaded $seed and $bind_dn into $state/data" >&2
fi

exec slapd -f "$state/slapd.conf" -h "ldap://$host:$port/" -d 0
