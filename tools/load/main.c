/* main.c — attnd-load: an HTTP load generator for attnd (see load_app.c and --help). */
#include "load_app.h"

int main(int argc, char **argv) { return load_app_main(argc, argv); }
