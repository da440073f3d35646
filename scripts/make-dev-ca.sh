#!/usr/bin/env bash
# make-dev-ca.sh DIR [--allocator NAME]... [--node NAME]...
#
# Makes a local certificate authority for trying Allot with TLS and mTLS,
# and what a small fleet needs, in DIR:
#
#   ca.crt, ca.key             the CA (kept if DIR already has one)
#   allocator.crt/.key         one allocator certificate for localhost,
#                              127.0.0.1 and every --allocator NAME
#   <node>.crt/.key            a client certificate per --node NAME, with
#                              NAME as its CN and DNS name: the allocator's
#                              default --tls-node-id "{node}" then accepts
#                              node_id NAME from it
#   gossip.keyring             a gossip key (--gossip-keyring, GossipConfig.Keys)
#   tokens                     a shared token (--auth-token-file, Config.Token)
#
# Files that exist are left alone, so running it again only adds what is
# missing. For development only: keys are unencrypted and the CA lives
# beside them.
set -euo pipefail

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

command -v openssl >/dev/null 2>&1 || {
	echo "make-dev-ca: openssl is not installed (apt-get install -y openssl)" >&2
	exit 1
}

[ $# -ge 1 ] || usage
dir=$1
shift
allocators=()
nodes=()
while [ $# -gt 0 ]; do
	case $1 in
	--allocator) [ $# -ge 2 ] || usage; allocators+=("$2"); shift 2 ;;
	--node) [ $# -ge 2 ] || usage; nodes+=("$2"); shift 2 ;;
	*) echo "make-dev-ca: unknown argument $1" >&2; usage ;;
	esac
done
for n in ${allocators[@]+"${allocators[@]}"} ${nodes[@]+"${nodes[@]}"}; do
	case $n in
	*[!A-Za-z0-9.-]* | "") echo "make-dev-ca: name \"$n\": use letters, digits, '.' and '-'" >&2; exit 2 ;;
	esac
done

mkdir -p "$dir"
umask 077
days=30

if [ ! -s "$dir/ca.crt" ]; then
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 365 \
		-subj "/CN=Allot dev CA" -keyout "$dir/ca.key" -out "$dir/ca.crt" \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
	echo "make-dev-ca: made the CA $dir/ca.crt" >&2
fi

# issue NAME CN SAN USAGE: a key and a certificate signed by the CA.
issue() {
	local name=$1 cn=$2 san=$3 usage=$4
	[ -s "$dir/$name.crt" ] && return 0
	local ext
	ext=$(mktemp)
	printf 'subjectAltName=%s\nextendedKeyUsage=%s\nkeyUsage=critical,digitalSignature\nbasicConstraints=CA:FALSE\n' \
		"$san" "$usage" >"$ext"
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$cn" \
		-keyout "$dir/$name.key" -out "$dir/$name.csr" 2>/dev/null
	openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
		-days "$days" -extfile "$ext" -out "$dir/$name.crt" 2>/dev/null
	rm -f "$dir/$name.csr" "$ext"
	echo "make-dev-ca: issued $dir/$name.crt for $san" >&2
}

san="DNS:localhost,IP:127.0.0.1"
for a in ${allocators[@]+"${allocators[@]}"}; do
	san="$san,DNS:$a"
done
issue allocator allocator "$san" serverAuth,clientAuth
for n in ${nodes[@]+"${nodes[@]}"}; do
	issue "$n" "$n" "DNS:$n" clientAuth
done

if [ ! -s "$dir/gossip.keyring" ]; then
	{ echo "# gossip keys, base64, the first one encrypts"; openssl rand -base64 32; } >"$dir/gossip.keyring"
	echo "make-dev-ca: made $dir/gossip.keyring" >&2
fi
if [ ! -s "$dir/tokens" ]; then
	openssl rand -hex 24 >"$dir/tokens"
	echo "make-dev-ca: made $dir/tokens" >&2
fi
