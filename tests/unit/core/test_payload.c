/*
 * test_payload.c — payload.h: a stored Tinode payload split into content and head without
 * a parser. The spans must be exactly what jansson prints for those members (checked on
 * random documents, escapes and nesting included), and anything not in the canonical form
 * must be refused so callers fall back to parsing.
 */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "qim/payload.h"
#include "testsupport.h"

static qim_message_content tinode(const char *payload) {
  qim_message_content c = {.message_type = QIM_MESSAGE_TYPE_TEXT, .schema_version = QIM_PAYLOAD_SCHEMA_TINODE};
  c.payload_or_ciphertext = (qim_bytes){(uint8_t *)payload, strlen(payload)};
  return c;
}

static void assert_span(qim_json_span s, const char *want) {
  assert_int_equal(s.n, strlen(want));
  assert_memory_equal(s.p, want, s.n);
}

static void test_split_finds_content_and_head_spans(void **state) {
  (void)state;
  qim_json_span body, head;
  qim_message_content c = tinode("{\"content\":\"hi\"}");
  assert_int_equal(qim_payload_split_tinode(&c, &body, &head), 0);
  assert_span(body, "\"hi\"");
  assert_int_equal(head.n, 0);
  const char *tricky = "{\"content\":{\"ent\":[{\"tp\":\"MN\"}],\"txt\":\"a\\\"}{,]\\\\\"},"
                       "\"head\":{\"mime\":\"text/x-drafty\",\"reply\":\":3\"}}";
  c = tinode(tricky);
  assert_int_equal(qim_payload_split_tinode(&c, &body, &head), 0);
  assert_span(body, "{\"ent\":[{\"tp\":\"MN\"}],\"txt\":\"a\\\"}{,]\\\\\"}");
  assert_span(head, "{\"mime\":\"text/x-drafty\",\"reply\":\":3\"}");
  const char *scalars[] = {"{\"content\":12.5e3}", "{\"content\":null}", "{\"content\":[]}",
                           "{\"content\":{}}", "{\"content\":-1,\"head\":{}}", NULL};
  for (int i = 0; scalars[i]; i++) {
    c = tinode(scalars[i]);
    assert_int_equal(qim_payload_split_tinode(&c, &body, &head), 0);
  }
}

static void test_split_refuses_what_is_not_the_canonical_form(void **state) {
  (void)state;
  const char *bad[] = {
      "",                                        /* wiped */
      "\"hi\"",                                  /* not the envelope */
      "{ \"content\":1}",                        /* whitespace */
      "{\"content\": 1}",
      "{\"head\":{},\"content\":1}",             /* keys out of order */
      "{\"content\":1,\"mime\":\"x\"}",          /* another key */
      "{\"content\":1,\"head\":\"x\"}",          /* a head that is not an object */
      "{\"content\":1}x",                        /* trailing bytes */
      "{\"content\":{\"a\":1}",                  /* truncated */
      "{\"content\":\"abc}",
      "{\"content\":[1,]}",                      /* a missing value */
      "{\"content\":{\"a\"1}}",                  /* a missing colon */
      "{\"content\":{1:2}}",                     /* a key that is not a string */
      "{\"content\":[1}}",                       /* mismatched brackets */
      "{\"content\":\"a\nb\"}",                  /* a raw control character */
      "{\"content\":}",
      NULL,
  };
  for (int i = 0; bad[i]; i++) {
    qim_message_content c = tinode(bad[i]);
    qim_json_span body = {"x", 1}, head = {"x", 1};
    assert_int_equal(qim_payload_split_tinode(&c, &body, &head), -EINVAL);
    assert_int_equal(body.n, 0);
    assert_int_equal(head.n, 0);
  }
  qim_message_content c = tinode("{\"content\":1}");
  c.schema_version = 0; /* opaque bytes of a qim client */
  qim_json_span body, head;
  assert_int_equal(qim_payload_split_tinode(&c, &body, &head), -EINVAL);
}

/* ---- random documents ------------------------------------------------------------------ */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (uint32_t)rng;
}

static json_t *random_string(void) {
  static const char *const pieces[] = {"a", "\"", "\\", "}", "]", "{", "[", ",", ":", "\n", "\t",
                                       "\x01", "é", "☃", "MN", "/", " ", "\\u0000x"};
  char s[64] = "";
  size_t n = next() % 6;
  for (size_t i = 0; i < n; i++) strcat(s, pieces[next() % (sizeof pieces / sizeof *pieces)]);
  return json_string(s);
}

static json_t *random_value(int depth) {
  switch (next() % (depth > 4 ? 5 : 7)) {
  case 0: return json_integer((json_int_t)next() - (1 << 30));
  case 1: return json_real((double)next() / 7.0);
  case 2: return next() % 2 ? json_true() : json_null();
  case 3: case 4: return random_string();
  case 5: {
    json_t *a = json_array();
    for (uint32_t i = 0, n = next() % 4; i < n; i++) json_array_append_new(a, random_value(depth + 1));
    return a;
  }
  default: {
    json_t *o = json_object();
    for (uint32_t i = 0, n = next() % 4; i < n; i++) {
      json_t *k = random_string();
      json_object_set_new(o, json_string_value(k), random_value(depth + 1));
      json_decref(k);
    }
    return o;
  }
  }
}

static char *dump(const json_t *v) { return json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY); }

/* Documents written as history writes them; every strict prefix of one is refused. */
static void test_split_of_random_documents_matches_what_jansson_prints(void **state) {
  (void)state;
  for (int round = 0; round < 2000; round++) {
    json_t *content = random_value(0), *head = json_object();
    for (uint32_t i = 0, n = next() % 3; i < n; i++) json_object_set_new(head, i ? "reply" : "mime", random_value(1));
    json_t *env = json_pack("{sO}", "content", content);
    if (json_object_size(head)) json_object_set(env, "head", head);
    char *text = dump(env), *want_body = dump(content), *want_head = dump(head);
    qim_message_content c = tinode(text);
    qim_json_span body, h;
    assert_int_equal(qim_payload_split_tinode(&c, &body, &h), 0);
    assert_span(body, want_body);
    if (json_object_size(head)) assert_span(h, want_head);
    else assert_int_equal(h.n, 0);
    size_t len = strlen(text);
    for (size_t cut = 0; cut < len; cut++) {
      c.payload_or_ciphertext.n = cut;
      assert_int_equal(qim_payload_split_tinode(&c, &body, &h), -EINVAL);
    }
    free(text), free(want_body), free(want_head);
    json_decref(env), json_decref(content), json_decref(head);
  }
}

/* Nesting 512 deep is read in place; deeper is refused (the caller then parses it). */
static char *nested(size_t depth) {
  char *s = calloc(1, 2 * depth + 16);
  strcpy(s, "{\"content\":");
  memset(s + 11, '[', depth);
  memset(s + 11 + depth, ']', depth);
  strcat(s, "}");
  return s;
}

static void test_split_refuses_nesting_deeper_than_its_bound(void **state) {
  (void)state;
  qim_json_span body, head;
  char *ok = nested(512), *deep = nested(513);
  qim_message_content c = tinode(ok);
  assert_int_equal(qim_payload_split_tinode(&c, &body, &head), 0);
  assert_int_equal(body.n, 2 * 512);
  c = tinode(deep);
  assert_int_equal(qim_payload_split_tinode(&c, &body, &head), -EINVAL);
  free(ok), free(deep);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_split_finds_content_and_head_spans),
      cmocka_unit_test(test_split_refuses_what_is_not_the_canonical_form),
      cmocka_unit_test(test_split_of_random_documents_matches_what_jansson_prints),
      cmocka_unit_test(test_split_refuses_nesting_deeper_than_its_bound),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
