/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#include <string.h>
#include "control/ctlproto.h"

static const struct {
	const char *line;
	int cmd;
} commands[] = {
	{ "status", KT_CTL_STATUS },
	{ "status json", KT_CTL_STATUS_JSON },
	{ "reload", KT_CTL_RELOAD },
	{ "ping", KT_CTL_PING },
	{ "health", KT_CTL_HEALTH },
	{ "health live", KT_CTL_HEALTH_LIVE },
};

#define SUB_PREFIX "subscribe "
#define SUB_LEN (sizeof(SUB_PREFIX) - 1)

static int name_char(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       ch == '_' || ch == '.' || ch == '-' || ch == '@'; /* '@': a group's limit */
}

int kt_ctl_parse(const char *buf, size_t len)
{
	size_t n = len < KT_CTL_MAX_LINE ? len : KT_CTL_MAX_LINE;
	const char *nl = memchr(buf, '\n', n);
	size_t end = nl ? (size_t)(nl - buf) : n;

	/* a NUL is an error as soon as it arrives: no command can follow it */
	if (memchr(buf, 0, end))
		return KT_CTL_ERR_NUL;
	if (!nl)
		return len >= KT_CTL_MAX_LINE ? KT_CTL_ERR_TOO_LONG : KT_CTL_INCOMPLETE;
	if (end && buf[end - 1] == '\r')
		end--;
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strlen(commands[i].line) == end && !memcmp(buf, commands[i].line, end))
			return commands[i].cmd;
	/* "subscribe NAME": NAME as limit names are, 1..31 of [A-Za-z0-9_.-] */
	if (end > SUB_LEN && end - SUB_LEN < 32 && !memcmp(buf, SUB_PREFIX, SUB_LEN)) {
		for (size_t i = SUB_LEN; i < end; i++)
			if (!name_char(buf[i]))
				return KT_CTL_ERR_UNKNOWN;
		return KT_CTL_SUBSCRIBE;
	}
	return KT_CTL_ERR_UNKNOWN;
}

void kt_ctl_subscribe_name(const char *buf, char *out, size_t outlen)
{
	size_t n = 0;

	while (n + 1 < outlen && name_char(buf[SUB_LEN + n]))
		n++;
	memcpy(out, buf + SUB_LEN, n);
	out[n] = 0;
}

const char *kt_ctl_error_reply(int result)
{
	switch (result) {
	case KT_CTL_ERR_TOO_LONG:
		return "error: command line too long\n";
	case KT_CTL_ERR_NUL:
		return "error: NUL byte in command line\n";
	case KT_CTL_ERR_UNKNOWN:
		return "error: unknown command (expected status, status json, reload, ping, health, health live, subscribe NAME)\n";
	default:
		return NULL;
	}
}
