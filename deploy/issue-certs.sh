#!/usr/bin/env bash
# Issue the certificates the gRPC plugin server needs for mutual TLS, with the openssl CLI.
set -euo pipefail

usage() {
  cat <<USAGE
Usage:
  deploy/issue-certs.sh DIR CLIENT-NAME...

Creates in DIR (made if missing; existing files are kept, never overwritten):
  ca.crt, ca.key                 a CA that signs the server's and the clients' certificates
  tls.crt, tls.key               the server's certificate, for the Service's DNS names
  CLIENT-NAME.crt, .key          one client certificate per name (its common name is what
                                 grpc.readOnlyClients / grpc.mutatingClients in the
                                 configuration list)
and prints the kubectl command that stores the server's files in the Secret
coscheduling-grpc-tls that deploy/30-deployment.yaml mounts.

Keep ca.key offline: whoever holds it can mint client certificates.
Environment: NAMESPACE (default coscheduling-system), SERVICE (default coscheduling),
DAYS (default 365).
USAGE
}

case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  "") usage >&2; exit 2 ;;
esac
command -v openssl >/dev/null || { echo "issue-certs.sh: openssl is not on PATH" >&2; exit 2; }
DIR="$1"; shift
NAMESPACE="${NAMESPACE:-coscheduling-system}"
SERVICE="${SERVICE:-coscheduling}"
DAYS="${DAYS:-365}"
mkdir -p "$DIR"
umask 077

# $1 name, $2 common name, $3 extensions (newline-separated), $4 signing CA basename or ""
issue() {
  local name="$1" cn="$2" ext="$3" ca="$4"
  if [ -e "$DIR/$name.crt" ]; then echo "issue-certs.sh: keeping $DIR/$name.crt" >&2; return; fi
  local signer=()
  [ -n "$ca" ] && signer=(-CA "$DIR/$ca.crt" -CAkey "$DIR/$ca.key")
  printf '[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = %s\n[ext]\n%s\n' "$cn" "$ext" |
    openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout "$DIR/$name.key" -out "$DIR/$name.crt" -days "$DAYS" -extensions ext \
      -config /dev/stdin "${signer[@]}" 2>/dev/null
  echo "issue-certs.sh: wrote $DIR/$name.crt" >&2
}

LEAF="basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment"
issue ca "coscheduling-grpc-ca" "basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign" ""
SANS="DNS:$SERVICE,DNS:$SERVICE.$NAMESPACE,DNS:$SERVICE.$NAMESPACE.svc"
SANS="$SANS,DNS:$SERVICE.$NAMESPACE.svc.cluster.local,DNS:localhost,IP:127.0.0.1"
issue tls "$SERVICE.$NAMESPACE.svc" "$LEAF
extendedKeyUsage = serverAuth
subjectAltName = $SANS" ca
for client in "$@"; do
  case "$client" in ""|*/*|.*|ca|tls) echo "issue-certs.sh: bad client name: '$client'" >&2; exit 2 ;; esac
  issue "$client" "$client" "$LEAF
extendedKeyUsage = clientAuth" ca
done

cat <<NEXT
# Store the server's certificate, its key and the client CA where the Deployment mounts them:
kubectl -n $NAMESPACE create secret generic coscheduling-grpc-tls \\
  --from-file=tls.crt=$DIR/tls.crt --from-file=tls.key=$DIR/tls.key \\
  --from-file=client-ca.crt=$DIR/ca.crt
# A client calls with its own pair and the CA, e.g.:
#   coscheduling call health --address $SERVICE.$NAMESPACE.svc:50051 \\
#     --ca $DIR/ca.crt --cert $DIR/<client>.crt --key $DIR/<client>.key
NEXT
