#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `ddprun --print_completion bash` (torchrun 2.x's --print-completion): the script it prints is
# sourced into a bash and driven as bash drives a completion function (COMP_WORDS, COMP_CWORD,
# COMPREPLY), for flags in both spellings, value sets, '=' split off or not, directories, and the
# program's own arguments; every flag `ddprun --help` lists is offered; `ddprun status` and
# `ddprun report` with their own flags.
. "$(dirname "$0")/lib.sh"
DDPRUN=$BIN/ddprun
S=$TMP/ddprun.bash
"$DDPRUN" --print_completion bash >"$S" 2>"$TMP/gen.err"; rc=$?
check "--print_completion bash: exit 0, a script that bash reads and that registers _ddprun" \
    bash -c "[ $rc -eq 0 ] && [ ! -s '$TMP/gen.err' ] && bash -n '$S' &&
        bash -c '. \"$S\" && complete -p ddprun' | grep -q -- '-F _ddprun'"

# offers WORD...: what completion offers when the last WORD is being completed (one per line,
# sorted), from $TMP as the current directory.
offers() {
    (cd "$TMP" && bash -c '. "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _ddprun
        printf "%s\n" "${COMPREPLY[@]}"' _ "$S" ddprun "$@") | sed '/^$/d' | sort | tr '\n' ' '
}
# expect WANT WORD...: completion offers exactly WANT (sorted, space-separated).
expect() {
    local want=$1 got
    shift
    got=$(offers "$@")
    [ "$got" = "$want" ] || echo "# ddprun $*<TAB>: offered '$got', expected '$want'"
    [ "$got" = "$want" ]
}
mkdir -p "$TMP/ckpts" "$TMP/logs"
touch "$TMP/train.py"
check "--nproc_per_node <TAB>: gpu cpu auto" expect "auto cpu gpu " --nproc_per_node ""
check "--rdzv-backend c<TAB>: c10d" expect "c10d " --rdzv-backend c
check "--numa_binding=<TAB> ('=' a word of its own): the four modes" \
    expect "core-complex exclusive node socket " --numa_binding =
check "--numa_binding=s<TAB>: socket" expect "socket " --numa_binding = s
check "--numa-binding=e<TAB> ('=' kept in the word): --numa-binding=exclusive" \
    expect "--numa-binding=exclusive " --numa-binding=e
check "--worker_store <TAB>: agent own" expect "agent own " --worker_store ""
check "--nnod<TAB>: --nnodes" expect "--nnodes " --nnod
check "--log_dir lo<TAB>: directories only" expect "logs " --log_dir lo
check "--master_port <TAB>: nothing to offer (a number)" expect "" --master_port ""
check "--standalone tr<TAB>: the program (a file)" expect "train.py " --standalone tr
check "after the program: its arguments are files, not ddprun's flags" \
    expect "" --nproc_per_node 2 train.py --nn
check "--tee=3 -- t<TAB>: the program after --" expect "train.py " --tee = 3 -- t
missing=
for f in $("$DDPRUN" --help | sed -nE 's/^ +(-[a-zA-Z], )?(--[a-z_]+).*/\2/p' | sort -u); do
    offers "$f" | grep -q -- "$f " || missing="$missing $f"
done
check "every flag of --help is offered (missing:${missing:- none})" [ -z "$missing" ]
# `ddprun status`: offered as the first word, then its own flags (both spellings), nothing after
# a flag that takes a value, and ddprun's own flags no more.
check "st<TAB>: status (and files)" expect "status " st
check "status --rd<TAB>: its rdzv flags, both spellings" \
    expect "--rdzv-backend --rdzv-conf --rdzv-endpoint --rdzv-id --rdzv_backend --rdzv_conf --rdzv_endpoint --rdzv_id " status --rd
check "status --j<TAB>: --json" expect "--json " status --rdzv_id x --j
check "status --rdzv_endpoint <TAB>: nothing to offer (an address)" expect "" status --rdzv_endpoint ""
check "status --timeout=<TAB>: nothing to offer (seconds)" expect "" status --timeout = ""
check "status --nproc<TAB>: ddprun's launch flags are not status's" expect "" status --nproc
missing=
for f in $("$DDPRUN" status --help 2>&1 | grep -oE -- '--[a-z_]+' | sort -u); do
    offers status "$f" | grep -q -- "$f " || missing="$missing $f"
done
check "every flag of ddprun status --help is offered (missing:${missing:- none})" [ -z "$missing" ]
# `ddprun report EVENTS -o OUT`: offered as the first word, then its flags; files for the rest.
touch "$TMP/events.jsonl"
check "rep<TAB>: report" expect "report " rep
check "report e<TAB>: the events file" expect "events.jsonl " report e
check "report events.jsonl --o<TAB>: --output" expect "--output " report events.jsonl --o
check "report events.jsonl -o c<TAB>: a file name (the directory)" expect "ckpts " report events.jsonl -o c
check "report events.jsonl --output=l<TAB>: a file name" expect "logs " report events.jsonl --output = l
check "report --nproc<TAB>: ddprun's launch flags are not report's" expect "" report --nproc
missing=
for f in $("$DDPRUN" report --help 2>&1 | sed -nE 's/^ +(-[a-z]), (--[a-z_]+).*/\1 \2/p'); do
    offers report "$f" | grep -q -- "$f " || missing="$missing $f"
done
check "every flag of ddprun report --help is offered (missing:${missing:- none})" [ -z "$missing" ]
"$DDPRUN" --print_completion zsh >"$TMP/zsh.out" 2>&1; rc=$?
check "--print_completion zsh: exit 2, one line naming the value" \
    bash -c "[ $rc -eq 2 ] && [ \$(wc -l <'$TMP/zsh.out') = 1 ] &&
        grep -q \"print_completion: 'zsh' is not a shell ddprun completes\" '$TMP/zsh.out'"
finish
