/* SPDX-License-Identifier: Apache-2.0
 * launch_completion_bash: `ddprun --print_completion bash` (torchrun 2.x's --print-completion),
 * a bash completion script generated from the flag table itself (cli.c), so that it offers every
 * flag in both spellings and never drifts from the parser: every value it offers for a flag is
 * one the parser accepts (test_launch_cli.c checks each). */
#include "launch_spec.h"

#include <stdio.h>
#include <string.h>

#include "launch_int.h"
#include "launch_report.h"
#include "launch_status.h"

/* The values offered after a flag: words, or "@dir" for a directory. A flag that takes a
 * value and is not listed gets no suggestion (a number, an address, an id). */
static const struct {
    const char *flag, *values;
} value_sets[] = {
    {"nproc-per-node", "gpu cpu auto"},
    {"rdzv-backend", "static c10d etcd etcd-v2"},
    {"numa-binding", "node socket exclusive core-complex"},
    {"worker-store", "agent own"},
    {"straggler-action", "warn exclude"},
    {"start-method", "spawn fork forkserver"},
    {"redirects", "0 1 2 3"},
    {"tee", "0 1 2 3"},
    {"event-log-handler", "null console json"},
    {"logs-specs", "default"},
    {"print-completion", "bash"},
    {"signals-to-handle", "SIGTERM SIGINT SIGHUP SIGQUIT SIGUSR1 SIGUSR2"},
    {"log-dir", "@dir"},
};

const char *launch_completion_values(const char *flag) {
    for (size_t i = 0; i < sizeof value_sets / sizeof value_sets[0]; i++)
        if (strcmp(value_sets[i].flag, flag) == 0)
            return value_sets[i].values;
    return NULL;
}

/* Both spellings of a dashed name, "--a-b|--a_b" (one when they are the same). */
static void spellings(FILE *out, const char *name, const char *sep) {
    char under[64];
    snprintf(under, sizeof under, "%s", name);
    for (char *c = under; *c; c++)
        if (*c == '-')
            *c = '_';
    fprintf(out, "--%s", name);
    if (strcmp(under, name) != 0)
        fprintf(out, "%s--%s", sep, under);
}

/* Every flag as bash patterns or words, sep between them; with_value: 1 only those taking a
 * value, 0 only those that do not, -1 all. */
static void flag_list(FILE *out, const char *sep, int with_value) {
    int first = 1;
    for (size_t k = 0; k < launch_cli_flag_count(); k++) {
        const char *name;
        char shortc;
        int takes = launch_cli_flag(k, &name, &shortc);
        if (name == NULL || (with_value >= 0 && takes != with_value))
            continue;
        fprintf(out, "%s", first ? "" : sep);
        spellings(out, name, sep);
        if (shortc)
            fprintf(out, "%s-%c", sep, shortc);
        first = 0;
    }
}

/* `ddprun status FLAGS`: its own flags (launch_status_flags, both spellings); a flag's value
 * (an endpoint, an id, seconds) gets no suggestion. */
static void status_function(FILE *out) {
    fprintf(out, "_ddprun_status() {\n"
                 "    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}\n"
                 "    [[ $prev == = ]] && prev=${COMP_WORDS[COMP_CWORD - 2]}\n"
                 "    case $prev in\n"
                 "    ");
    int first = 1;
    for (const launch_status_flag_t *f = launch_status_flags; f->name != NULL; f++) {
        if (!f->takes_value)
            continue;
        fprintf(out, "%s", first ? "" : "|");
        spellings(out, f->name, "|");
        first = 0;
    }
    fprintf(out, ") return ;;\n"
                 "    esac\n"
                 "    [[ $cur == = ]] && return # '=' after a flag that takes no value\n"
                 "    COMPREPLY=($(compgen -W \"");
    for (const launch_status_flag_t *f = launch_status_flags; f->name != NULL; f++) {
        spellings(out, f->name, " ");
        fprintf(out, " ");
    }
    fprintf(out, "-h\" -- \"$cur\"))\n"
                 "}\n");
}

/* `ddprun report EVENTS -o OUT`: its flags (launch_report_flags); files for the rest, the
 * events file and the picture alike. */
static void report_function(FILE *out) {
    fprintf(out, "_ddprun_report() {\n"
                 "    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}\n"
                 "    [[ $cur == = ]] && cur=\n"
                 "    [[ $prev == = ]] && prev=${COMP_WORDS[COMP_CWORD - 2]}\n"
                 "    case $prev in\n"
                 "    ");
    int first = 1;
    for (const launch_report_flag_t *f = launch_report_flags; f->name != NULL; f++) {
        if (!f->takes_value)
            continue;
        fprintf(out, "%s%s", first ? "" : "|", f->name);
        first = 0;
    }
    fprintf(out, ") COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n"
                 "    esac\n"
                 "    if [[ $cur == -* ]]; then\n"
                 "        COMPREPLY=($(compgen -W \"");
    for (const launch_report_flag_t *f = launch_report_flags; f->name != NULL; f++)
        fprintf(out, "%s ", f->name);
    fprintf(out, "-h\" -- \"$cur\"))\n"
                 "    else\n"
                 "        COMPREPLY=($(compgen -f -- \"$cur\"))\n"
                 "    fi\n"
                 "}\n");
}

/* Over 60 lines: the script is printed in order, as bash reads it. */
void launch_completion_bash(FILE *out) {
    fprintf(out, "# bash completion for ddprun, generated by `ddprun --print_completion bash`:\n"
                 "#   ddprun --print_completion bash > /etc/bash_completion.d/ddprun\n");
    status_function(out);
    report_function(out);
    fprintf(out,
            "_ddprun() {\n"
            "    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]} i w\n"
            "    local flag val pre=\n"
            "    COMPREPLY=()\n"
            "    # `ddprun status ...` and `ddprun report ...` (the first word only) have flags of "
            "their\n"
            "    # own.\n"
            "    if ((COMP_CWORD > 1)) && [[ ${COMP_WORDS[1]} == status ]]; then\n"
            "        _ddprun_status\n"
            "        return\n"
            "    fi\n"
            "    if ((COMP_CWORD > 1)) && [[ ${COMP_WORDS[1]} == report ]]; then\n"
            "        _ddprun_report\n"
            "        return\n"
            "    fi\n"
            "    # Once the program is named, the rest are its arguments: files. A flag's value\n"
            "    # is the next word, or follows '=' (a word of its own where COMP_WORDBREAKS has\n"
            "    # '=', as by default).\n"
            "    for ((i = 1; i < COMP_CWORD; i++)); do\n"
            "        w=${COMP_WORDS[i]}\n"
            "        if [[ ${COMP_WORDS[i + 1]} == = ]]; then\n"
            "            ((i += 2))\n"
            "            continue\n"
            "        fi\n"
            "        case $w in\n"
            "        --) COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n"
            "        --*=*) ;;\n"
            "        ");
    flag_list(out, "|", 1);
    fprintf(out, ") ((i++)) ;;\n"
                 "        -*) ;;\n"
                 "        *) COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n"
                 "        esac\n"
                 "    done\n"
                 "    if [[ $cur == = ]]; then\n"
                 "        flag=$prev val=\n"
                 "    elif [[ $prev == = ]]; then\n"
                 "        flag=${COMP_WORDS[COMP_CWORD - 2]} val=$cur\n"
                 "    elif [[ $cur == --*=* ]]; then\n"
                 "        flag=${cur%%%%=*} val=${cur#*=} pre=${cur%%%%=*}=\n"
                 "    elif [[ $cur == -* ]]; then\n"
                 "        COMPREPLY=($(compgen -W \"");
    flag_list(out, " ", -1);
    fprintf(out, "\" -- \"$cur\"))\n"
                 "        return\n"
                 "    else\n"
                 "        flag=$prev val=$cur\n"
                 "    fi\n"
                 "    case $flag in\n");
    for (size_t k = 0; k < launch_cli_flag_count(); k++) {
        const char *name;
        char shortc;
        if (!launch_cli_flag(k, &name, &shortc) || name == NULL)
            continue;
        const char *v = launch_completion_values(name);
        fprintf(out, "    ");
        spellings(out, name, "|");
        if (shortc)
            fprintf(out, "|-%c", shortc);
        if (v == NULL)
            fprintf(out, ") return ;;\n");
        else if (strcmp(v, "@dir") == 0)
            fprintf(out, ") COMPREPLY=($(compgen -P \"$pre\" -d -- \"$val\")); return ;;\n");
        else
            fprintf(out, ") COMPREPLY=($(compgen -P \"$pre\" -W \"%s\" -- \"$val\")); return ;;\n",
                    v);
    }
    fprintf(out,
            "    esac\n"
            "    [[ $cur == = ]] && return # '=' after a flag that takes no value\n"
            "    COMPREPLY=($(compgen -f -- \"$cur\")) # the program\n"
            "    ((COMP_CWORD == 1)) && COMPREPLY+=($(compgen -W \"status report\" -- \"$cur\"))\n"
            "}\n"
            "complete -o filenames -F _ddprun ddprun\n");
}
