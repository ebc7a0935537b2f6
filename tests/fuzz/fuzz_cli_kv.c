/*
 * fuzz_cli_kv.c - the other half of fuzz_cli.c: tools/cmd_kv.c compiled in
 * (its parse() and decode() are static there), with two entry points.
 */
#include "../../tools/cmd_kv.c"

int fuzz_kv_args(int argc, char **argv);
int fuzz_kv_decode(const char *s, bool hex);

int fuzz_kv_args(int argc, char **argv)
{
	kv_args a;
	return parse(argc, argv, 2, &a, "put KEY VALUE");
}

int fuzz_kv_decode(const char *s, bool hex)
{
	char *out = NULL;
	size_t len = 0;
	int rc = decode(s, hex, &out, &len);
	if (rc == 0) {
		if (len > strlen(s))
			abort(); /* decoding never makes a longer string */
		free(out);
	}
	return rc;
}
