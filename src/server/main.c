/*
 * main.c — qimd entry point (replaced by the full server wiring as rooms land).
 */
#include <stdio.h>

int main(void) {
  fprintf(stderr, "qimd: not wired yet\n");
  return 1;
}
