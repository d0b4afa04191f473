/* placeholder */
#include "cli/commands.h"
int tn_cmd_env(int argc, char **argv) { (void)argc; (void)argv; return 0; }
