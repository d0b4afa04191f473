/* shell_quote -- every command tandem prints is copy-paste safe: an argument that a POSIX shell would split,
 * expand or interpret (spaces, ';', '$', quotes, globs, an empty string) is printed single-quoted, so that pasting
 * the line into sh gives back exactly the argv tandem ran (or suggests). */
#ifndef TN_SHELL_QUOTE_H
#define TN_SHELL_QUOTE_H

#include <stdio.h>

/* s as one shell word: unchanged when made only of [A-Za-z0-9_@%+=:,./-] (and not empty), else inside '...' with
 * each ' written as '\''. malloc'ed. */
char *tn_sh_quote(const char *s);
/* argv[0..n) as one command line, words quoted as tn_sh_quote does and separated by single spaces. */
void tn_sh_print_argv(FILE *f, char *const *argv, int n);

#endif
