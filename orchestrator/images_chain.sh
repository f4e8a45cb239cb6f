# cluster image chain: one node's part of a pipelined image push (orchestrator/images/ (chain.py)).
#
# STATIC text: every value arrives as a positional parameter, nothing is ever interpolated
# into this script. Invoked as
#
#   sh -c "$SCRIPT" cluster-image "$SCRIPT" MODE ARGS...
#
# ($1 is this very text again, so a node can start the same script on the next node.)
#
# Modes and their ARGS:
#   chain    TAG COMPRESS CT AI AC KH IMAGE  ME_QUINT  [NEXT_QUINT...]
#            receive the stream on stdin; feed the local `docker load` and, at the same time,
#            forward the same bytes to the next node, which runs `chain` for the rest.
#   source   TAG COMPRESS CT AI AC KH IMAGE  ME_QUINT  NEXT_QUINT [NEXT_QUINT...]
#            `docker save IMAGE` here (a node that holds the image), compress, forward.
#   hopcheck TAG -        CT AI AC KH -      ME_QUINT  NEXT_QUINT
#            can this node open an SSH session on the next one (keys, host keys, route)?
#   cleanup  TAG NAME
#            stop what an earlier run of TAG left on this node (found by its pid file).
#   wchain / wsource: the same as chain / source for a model's weights (orchestrator/weights/):
#            IMAGE is the push's JSON spec and one more argument, PROG, follows it: the node
#            program (Python) that writes the files (`recv`) or reads them (`send`) in place of
#            `docker load` / `docker save`. Everything else (tee -p, hops, words) is shared.
#
# A QUINT is five arguments: NAME USER HOST PORT DOCKER_HOST ('-' for the default daemon).
# COMPRESS is zstd or none; CT the SSH connect timeout; AI/AC ServerAliveInterval/CountMax;
# KH known_hosts lines for the hops (empty: the node's own ~/.ssh/known_hosts only).
#
# Everything this script says goes to stdout as lines `@@cluster-image EVENT NODE ...`;
# the lines of every node after this one arrive through the forwarding SSH session and are
# passed up unchanged, so the controller hears the whole chain on one channel.

set -u
self=$1
mode=$2
shift 2
kind=image
case $mode in
    wchain | wsource)
        kind=weights
        mode=${mode#w}
        ;;
esac

P=@@cluster-image

say() {
    printf '%s %s\n' "$P" "$*"
}

# Each line of a file, as `EVENT NODE text` lines (at most the last 20, carriage returns gone).
say_lines() {
    [ -s "$3" ] || return 0
    tail -n 20 "$3" | tr -d '\r' | while IFS= read -r line; do
        say "$1" "$2" "$line"
    done
}

# Single-quote one word for the remote login shell.
q() {
    printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"
}

valid_word() {
    case $1 in
        '' | -* | */* | *[!A-Za-z0-9._:@-]*) return 1 ;;
    esac
    return 0
}

if [ "$mode" = cleanup ]; then
    tag=$1
    name=$2
    valid_word "$tag" && valid_word "$name" || { echo "cleanup: bad arguments" >&2; exit 2; }
    d=${TMPDIR:-/tmp}/cluster-image.$tag.$name
    [ -d "$d" ] || exit 0
    pg=$(cat "$d/pgid" 2>/dev/null || true)
    case $pg in
        '' | *[!0-9]*) ;;
        *)
            # Only the process group this tag started: its leader's command line names the tag.
            if tr '\0' ' ' <"/proc/$pg/cmdline" 2>/dev/null | grep -q -- "$tag"; then
                if kill -TERM "-$pg" 2>/dev/null; then # dash's kill takes no `--`
                    echo "stopped process group $pg"
                    sleep 1
                    kill -KILL "-$pg" 2>/dev/null
                fi
            fi
            ;;
    esac
    rm -rf "$d"
    exit 0
fi

tag=$1
compress=$2
ct=$3
ai=$4
ac=$5
kh=$6
image=$7
shift 7
prog=-
if [ "$kind" = weights ]; then
    prog=$1
    shift
fi
me=$1
medh=$5
shift 5

for w in "$tag" "$me"; do
    valid_word "$w" || { say error "$me" "bad argument: $w"; exit 2; }
done
[ "$medh" = - ] || export DOCKER_HOST="$medh"

# Work folders of earlier pushes to this node whose process group is gone (killed before its
# trap could run, e.g. a node cut off mid-push and restarted): ours to remove.
for old in "${TMPDIR:-/tmp}"/cluster-image.*."$me"; do
    [ -d "$old" ] || continue
    opg=$(cat "$old/pgid" 2>/dev/null || true)
    case $opg in '' | *[!0-9]*) continue ;; esac
    kill -0 "$opg" 2>/dev/null || rm -rf "$old"
done
# Hop connections of earlier pushes from this node that are gone (ControlPersist ran out).
for old in "${TMPDIR:-/tmp}"/cluster-image-cm.*."$me".*; do
    [ -d "$old" ] && [ ! -S "$old/s" ] || continue
    [ -n "$(find "$old" -maxdepth 0 -mmin +2 2>/dev/null)" ] && rm -rf "$old"
done

d=${TMPDIR:-/tmp}/cluster-image.$tag.$me
if ! mkdir -m 700 "$d" 2>/dev/null; then
    say error "$me" "cannot create $d (exists already, or no space)"
    exit 3
fi
trap 'rm -rf "$d"' EXIT
trap 'exit 143' TERM HUP INT

# The process group of this session (sshd made our shell its leader): what `cleanup` stops.
pg=$(sed 's/.*) //' "/proc/$$/stat" 2>/dev/null | cut -d' ' -f3)
printf '%s\n' "${pg:-$$}" >"$d/pgid"
say start "$me" "${pg:-$$}"

if [ -n "$kh" ]; then
    printf '%s\n' "$kh" >"$d/known_hosts"
    khfiles="$d/known_hosts $HOME/.ssh/known_hosts"
else
    khfiles="$HOME/.ssh/known_hosts"
fi

# GNU tee -p keeps writing to the other outputs when one of them (a dead hop, a failed load)
# goes away: one broken node never starves its neighbours.
if tee -p </dev/null >/dev/null 2>&1; then
    TEE="tee -p"
else
    TEE="tee"
fi

# AES-GCM first: hardware-accelerated on x86 (AES-NI) and on Grace (ARMv8 crypto), several
# times cheaper per byte than OpenSSH's default chacha20-poly1305; chacha20 stays as fallback.
CIPHERS=aes128-gcm@openssh.com,aes256-gcm@openssh.com,chacha20-poly1305@openssh.com

# One SSH connection per hop for the whole push: the hop check opens them (every hop at once)
# and leaves each up for a while (ControlPersist); the round's hop is then one more session on
# it, not a new connection (no key exchange, no authentication, no sshd re-exec): the chain's
# hops start one after the other in a fraction of the time. What the connection itself says (a
# dead link's "Timeout, server ... not responding.") goes to its log (-E), and from there to the
# hop's stderr. A path too long for a unix socket, or no folder: a plain connection, as before.
# A round's hop check runs with the round's tag plus `hc` (TAG-r1hc for TAG-r1): both name the
# same connection, and no other round's (a late end of round 1 never closes round 2's).
cm_dir() { # NEXT_NAME
    printf '%s' "${TMPDIR:-/tmp}/cluster-image-cm.${tag%hc}.$me.$1"
}

# Up to 3 s for a connection another ssh is opening (its socket appears once it is up); then
# go ahead either way (no socket: ssh opens a connection of its own).
wait_socket() { # PATH
    n=0
    while [ ! -S "$1" ] && [ "$n" -lt 60 ]; do
        sleep 0.05 2>/dev/null || sleep 1
        n=$((n + 1))
    done
    return 0
}

hop_ssh() { # NAME HOST PORT USER REMOTE_COMMAND
    cm=$(cm_dir "$1")
    # Ours alone: made here 0700, or made by this user and not a link (the hop check's, whose
    # connection may still be opening: the chain starts while the check runs, so wait for it).
    # (OpenSSH binds "$cm/s.<16 hex>" first: 108 bytes of sun_path, so at most 88 here.)
    if [ "${#cm}" -le 88 ] && { mkdir -m 700 "$cm" 2>/dev/null ||
        { [ -d "$cm" ] && [ ! -L "$cm" ] && [ -O "$cm" ] && wait_socket "$cm/s"; }; }; then
        off=$(wc -c <"$cm/log" 2>/dev/null || echo 0)
        ssh -T -o BatchMode=yes -o StrictHostKeyChecking=yes \
            -o "UserKnownHostsFile=$khfiles" -o "Ciphers=$CIPHERS" \
            -o "ConnectTimeout=$ct" -o "ServerAliveInterval=$ai" -o "ServerAliveCountMax=$ac" \
            -o ControlMaster=auto -o "ControlPath=$cm/s" -o ControlPersist=20 -E "$cm/log" \
            -o LogLevel=ERROR -p "$3" -l "$4" -- "$2" "$5"
        hrc=$?
        tail -c "+$((off + 1))" "$cm/log" >&2 2>/dev/null
        return "$hrc"
    fi
    ssh -T -o BatchMode=yes -o StrictHostKeyChecking=yes \
        -o "UserKnownHostsFile=$khfiles" -o "Ciphers=$CIPHERS" \
        -o "ConnectTimeout=$ct" -o "ServerAliveInterval=$ai" -o "ServerAliveCountMax=$ac" \
        -o LogLevel=ERROR -p "$3" -l "$4" -- "$2" "$5"
}

# The hop's connection is no longer needed: end it now rather than after ControlPersist.
hop_close() { # NAME HOST
    cm=$(cm_dir "$1")
    [ -S "$cm/s" ] && ssh -o "ControlPath=$cm/s" -O exit -- "$2" >/dev/null 2>&1
    rm -rf "$cm"
}

# The command that runs this script in `chain` mode on the next node, for the quints "$@".
chain_cmd() {
    w=
    [ "$kind" = weights ] && w=w
    c="sh -c $(q "$self") cluster-image $(q "$self") ${w}chain $(q "$tag") $(q "$compress")"
    c="$c $(q "$ct") $(q "$ai") $(q "$ac") $(q "$kh") $(q "$image")"
    [ "$kind" = weights ] && c="$c $(q "$prog")"
    for a in "$@"; do
        c="$c $(q "$a")"
    done
    printf '%s' "$c"
}

# Report the bytes a counter (dd reading a FIFO) has read so far, once a second, until it
# ends: `progress NODE BYTES` on a receiving node, `sending NODE WIRE RAW` on a source node.
report_progress() { # EVENT PID [RAW_PID]
    last=
    while kill -0 "$2" 2>/dev/null; do
        b=$(sed -n 's/^rchar: //p' "/proc/$2/io" 2>/dev/null)
        r=
        if [ $# -ge 3 ]; then
            r=$(sed -n 's/^rchar: //p' "/proc/$3/io" 2>/dev/null)
        elif [ "$1" = sending ]; then
            r=$b
        fi
        if [ -n "$b" ] && [ "$b $r" != "$last" ]; then
            say "$1" "$me" "$b" $r
            last="$b $r"
        fi
        sleep 1 >/dev/null 2>&1 # holds no pipe: killing this loop closes its stdout at once
    done
}

# What a source node sends, and what a receiving node does with it: an image's `docker save`
# and `docker load`, or the weights' node program reading and writing files.
payload_out() {
    if [ "$kind" = weights ]; then
        python3 -c "$prog" send "$image" "$me"
    else
        docker save "$image"
    fi
}

payload_in() {
    if [ "$kind" = weights ]; then
        python3 -c "$prog" recv "$image" "$tag" "$me"
    else
        docker load
    fi
}

counted() { # FILE: the byte count dd wrote there when it finished
    sed -n 's/^\([0-9][0-9]*\) bytes.*/\1/p' "$1" 2>/dev/null | tail -n 1
}

if [ "$mode" = hopcheck ]; then
    hop_ssh "$1" "$3" "$4" "$2" true 2>"$d/hop.err"
    rc=$?
    say hopcheck "$me" "$1" "$rc"
    say_lines hoperr "$me" "$d/hop.err"
    exit "$rc"
fi

if [ "$mode" = source ]; then
    [ $# -ge 5 ] || { say error "$me" "source: no node to send to"; exit 2; }
    next=$1
    mkfifo "$d/cnt" || { say error "$me" "mkfifo failed in $d"; exit 3; }
    dd of=/dev/null bs=1M <"$d/cnt" 2>"$d/cnt.err" &
    cnt_pid=$!
    if [ "$compress" = zstd ]; then
        mkfifo "$d/raw" || { say error "$me" "mkfifo failed in $d"; exit 3; }
        dd of=/dev/null bs=1M <"$d/raw" 2>"$d/raw.err" &
        raw_pid=$!
        report_progress sending "$cnt_pid" "$raw_pid" &
        rep_pid=$!
        { payload_out 2>"$d/save.err"; echo $? >"$d/save.rc"; } |
            $TEE "$d/raw" | zstd -3 -T0 -q -c | $TEE "$d/cnt" |
            hop_ssh "$1" "$3" "$4" "$2" "$(chain_cmd "$@")" 2>"$d/hop.err"
        hop_rc=$?
        wait "$raw_pid" 2>/dev/null
    else
        report_progress sending "$cnt_pid" &
        rep_pid=$!
        { payload_out 2>"$d/save.err"; echo $? >"$d/save.rc"; } |
            $TEE "$d/cnt" | hop_ssh "$1" "$3" "$4" "$2" "$(chain_cmd "$@")" 2>"$d/hop.err"
        hop_rc=$?
    fi
    wait "$cnt_pid" 2>/dev/null
    kill "$rep_pid" 2>/dev/null
    save_rc=$(cat "$d/save.rc" 2>/dev/null || echo 255)
    say_lines saveerr "$me" "$d/save.err"
    say save "$me" "$save_rc"
    sent=$(counted "$d/cnt.err")
    raw=$(counted "$d/raw.err")
    [ "$compress" = zstd ] || raw=$sent
    say sent "$me" "${sent:-0}" "${raw:-0}"
    say_lines hoperr "$me" "$d/hop.err"
    say hop "$me" "$next" "$hop_rc"
    hop_close "$next" "$3"
    say end "$me"
    exit 0
fi

[ "$mode" = chain ] || { say error "$me" "unknown mode $mode"; exit 2; }

mkfifo "$d/load" "$d/cnt" || { say error "$me" "mkfifo failed in $d"; exit 3; }
dd of=/dev/null bs=1M <"$d/cnt" 2>"$d/cnt.err" &
cnt_pid=$!
report_progress progress "$cnt_pid" &
rep_pid=$!

# The local load. It reports as soon as it ends, while the bytes may still be flowing on to
# the next node. `Error unpacking image` is a failure even when docker load exits 0.
(
    if [ "$compress" = zstd ]; then
        { zstd -dcq <"$d/load"; echo $? >"$d/unzip.rc"; } | payload_in >"$d/load.out" 2>&1
    else
        payload_in <"$d/load" >"$d/load.out" 2>&1
    fi
    rc=$?
    say_lines loadout "$me" "$d/load.out"
    say load "$me" "$rc" "$(cat "$d/unzip.rc" 2>/dev/null || echo -)"
) &
load_pid=$!

if [ $# -ge 5 ]; then
    next=$1
    $TEE "$d/load" "$d/cnt" | hop_ssh "$1" "$3" "$4" "$2" "$(chain_cmd "$@")" 2>"$d/hop.err"
    hop_rc=$?
else
    next=-
    $TEE "$d/load" "$d/cnt" >/dev/null
    hop_rc=-
fi
wait "$load_pid"
wait "$cnt_pid" 2>/dev/null
kill "$rep_pid" 2>/dev/null
got=$(counted "$d/cnt.err")
say recv "$me" "${got:-0}"
if [ "$next" != - ]; then
    say_lines hoperr "$me" "$d/hop.err"
    say hop "$me" "$next" "$hop_rc"
    hop_close "$next" "$3"
fi
say end "$me"
exit 0
