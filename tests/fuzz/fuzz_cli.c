/*
 * fuzz_cli.c - libFuzzer target: the `walrus` command's input parsing.
 *
 * `walrus load` reads KEY<TAB>VALUE lines (hexadecimal with --hex) from
 * stdin, and put/get/del/scan take keys and values as arguments (--hex).
 * The parsing functions are static in tools/cmd_load.c and tools/cmd_kv.c,
 * so this harness compiles those very files into itself (#include of the
 * source, not a copy) and calls them directly; nothing is executed, no
 * instance is opened (a batch is built in memory and thrown away).
 *
 * tools/walrus.c (tool_fail, tool_hex_decode, ...) comes in through
 * fuzz_cli_tool.c, with its main() renamed.
 *
 * Oracles besides the sanitizers: with --hex, a line is accepted only if
 * its key and value are made of hexadecimal digits (an earlier sscanf("%2x")
 * decoder also took " f", "+f" and "-1"); every line added to the batch has
 * its key kept for its ack.
 *
 * Input: byte 0 = flags (bit 0: --hex; bit 1: also run each line through
 * cmd_kv.c's argument parser and hex decoder), then lines as `load` reads
 * them.  Nothing may crash or read out of bounds; a bad line must be
 * reported as a usage error.
 */
#include "../../tools/cmd_load.c"

#include <ctype.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* fuzz_cli_kv.c: cmd_kv.c's parse() and decode(). */
int fuzz_kv_args(int argc, char **argv);
int fuzz_kv_decode(const char *s, bool hex);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool quiet;
	if (!quiet) {
		/* add_line reports bad lines on stderr: keep the fuzzer's output
		 * readable.  Only the stdio stream is replaced, not fd 2 (freopen
		 * would redirect fd 2 and with it libFuzzer's statistics and the
		 * sanitizers' crash reports, which write there). */
		FILE *null = fopen("/dev/null", "w");
		if (null == NULL)
			return 0;
		stderr = null;
		quiet = true;
	}
	if (size < 1 || size > 65536)
		return 0;
	load_args a = {.batch = 1000000, .hex = data[0] & 1};
	bool kv = data[0] & 2;
	data++;
	size--;
	walrus_batch *b = walrus_batch_new();
	acks ak = {calloc(size + 1, sizeof(char *)), calloc(size + 1, sizeof(size_t)), 0};
	if (b == NULL || ak.keys == NULL || ak.lens == NULL)
		goto out;
	long lineno = 0;
	size_t pos = 0;
	while (pos < size) {
		const uint8_t *nl = memchr(data + pos, '\n', size - pos);
		size_t n = nl ? (size_t)(nl - (data + pos)) : size - pos;
		/* getline's buffer: exactly the line and its NUL */
		char *line = malloc(n + 1);
		if (line == NULL)
			break;
		memcpy(line, data + pos, n);
		line[n] = '\0';
		pos += n + 1;
		lineno++;
		if (n > 0) {
			char *orig = malloc(n + 1);
			if (orig == NULL) {
				free(line);
				break;
			}
			memcpy(orig, line, n + 1);
			if (add_line(b, line, n, lineno, &a, &ak) == 0 && a.hex)
				for (size_t i = 0; i < n; i++)
					if (orig[i] != '\t' && !isxdigit((unsigned char)orig[i])) {
						fprintf(stdout,
						        "fuzz_cli: --hex accepted a line with "
						        "the non-hex byte 0x%02x\n",
						        (unsigned char)orig[i]);
						abort();
					}
			free(orig);
		}
		if (kv && n > 0 && memchr(line, '\0', n) == NULL) {
			/* the same line as command-line arguments, split at TABs */
			char *argv[8] = {"put"};
			int argc = 1;
			char *copy = strdup(line), *save = NULL;
			if (copy != NULL) {
				for (char *t = strtok_r(copy, "\t", &save); t && argc < 7;
				     t = strtok_r(NULL, "\t", &save))
					argv[argc++] = t;
				argv[argc] = NULL;
				(void)fuzz_kv_args(argc, argv);
				for (int i = 1; i < argc; i++)
					(void)fuzz_kv_decode(argv[i], a.hex);
				free(copy);
			}
		}
		free(line);
	}
	if (walrus_batch_count(b) > (size_t)ak.n)
		abort(); /* every line in the batch has its key kept for the ack */
out:
	for (long i = 0; i < ak.n; i++)
		free(ak.keys[i]);
	free(ak.keys);
	free(ak.lens);
	walrus_batch_free(b);
	return 0;
}
