// GBNF grammars: parse errors with their positions, the checks after parsing (undefined rules, the
// root, left recursion, limits), every construct of the language on small grammars, JSON /
// arithmetic / list grammars, the syntax forms llama.cpp's grammars/ files use, partial UTF-8
// characters, and the token mask against accepts() token by token.
#include <gtest/gtest.h>

#include <random>

#include "graft/core/error.h"
#include "graft/engine/grammar.h"
#include "support/json_grammar.h"

namespace graft::engine {
namespace {

// The message and kind parse_grammar throws for `text` ("" and kInternal if it parses).
std::pair<std::string, ErrorKind> parse_error(std::string_view text, std::string_view root = "root") {
  try {
    parse_grammar(text, root);
  } catch (const Error& e) {
    return {e.what(), e.kind()};
  }
  return {"", ErrorKind::kInternal};
}

void expect_error(std::string_view text, ErrorKind kind, const std::string& message) {
  auto [what, k] = parse_error(text);
  EXPECT_EQ(what, message) << "grammar:\n" << text.substr(0, 300);
  EXPECT_EQ(k, kind) << what;
}

bool sentence(const std::shared_ptr<const Grammar>& g, std::string_view s) {
  GrammarMatcher m(g);
  if (!m.accepts(s)) return false;
  m.accept(s);
  return m.can_end();
}

bool prefix(const std::shared_ptr<const Grammar>& g, std::string_view s) { return GrammarMatcher(g).accepts(s); }

// ---- parse errors -------------------------------------------------------------------------------

TEST(GrammarParse, SyntaxErrorsNameLineAndColumn) {
  const ErrorKind bad = ErrorKind::kBadRequest;
  expect_error("root ::= \"abc", bad, "grammar: line 1, column 10: unterminated string literal");
  expect_error("root ::= [a-z", bad, "grammar: line 1, column 10: unterminated character class");
  expect_error("root = \"a\"", bad, "grammar: line 1, column 6: expected '::=' after rule name 'root', found '='");
  expect_error("root ::= a\na ::= \"x\" )", bad,
               "grammar: line 2, column 11: expected a symbol, '|' or the end of the line, found ')'");
  expect_error("root ::= ( \"a\" | \"b\"\n", bad,
               "grammar: line 2, column 1: expected ')' to close the group opened at line 1, column 10, found the end "
               "of the grammar");
  expect_error("root ::= \"\\q\"", bad, "grammar: line 1, column 11: unknown escape: '\\' followed by 'q'");
  expect_error("root ::= \"a\" \xFF", bad,
               "grammar: line 1, column 14: expected a symbol, '|' or the end of the line, found byte 0xFF");
  expect_error("root ::= \"\\xZ1\"", bad, "grammar: line 1, column 11: expected 2 hex digits in the escape, found 'Z'");
  expect_error("root ::= \"\\U00110000\"", bad, "grammar: line 1, column 11: code point beyond U+10FFFF");
  expect_error("root ::= * \"a\"", bad, "grammar: line 1, column 10: expected a symbol before '*'");
  expect_error("root ::= \"a\"{2,1}", bad, "grammar: line 1, column 13: repetition maximum 1 is below its minimum 2");
  expect_error("root ::= \"a\"{x}", bad, "grammar: line 1, column 14: expected a repetition count, found 'x'");
  expect_error("root ::= \"a\"{2 3}", bad, "grammar: line 1, column 16: expected ',' or '}' in the repetition, found '3'");
  expect_error("root ::= \"a\"{2,3", bad,
               "grammar: line 1, column 17: expected '}' to close the repetition, found the end of the grammar");
  expect_error("root ::= [z-a]", bad, "grammar: line 1, column 11: character range ends below its start");
  expect_error("root ::= []", bad, "grammar: line 1, column 10: empty character class");
  // Outside parentheses a newline ends the rule, as in llama.cpp: a `|` line of its own is an error.
  expect_error("root ::= \"a\"\n  | \"b\"", bad, "grammar: line 2, column 3: expected a rule name, found '|'");
  expect_error("root ::= \"a\"\nroot ::= \"b\"", bad,
               "grammar: line 2, column 1: rule 'root' is defined twice (first at line 1, column 1)");
  // Columns count characters, not bytes.
  expect_error("root ::= \"é\" )", bad,
               "grammar: line 1, column 14: expected a symbol, '|' or the end of the line, found ')'");
  expect_error("root ::= \"\xC3\x28\"", bad, "grammar: line 1, column 11: invalid UTF-8 in the grammar");
  expect_error("root ::= \"a\"\r\nx ::= \"b\" }", bad,
               "grammar: line 2, column 11: expected a symbol, '|' or the end of the line, found '}'");
}

TEST(GrammarParse, TokenMatchesAreUnsupported) {
  expect_error("root ::= <think> \"a\"", ErrorKind::kUnsupported,
               "grammar: line 1, column 10: token matches (<[id]>, <token>, !<...>) are not supported");
  expect_error("root ::= !<[12]>*", ErrorKind::kUnsupported,
               "grammar: line 1, column 10: token matches (<[id]>, <token>, !<...>) are not supported");
}

TEST(GrammarParse, UndefinedRulesAndMissingRoot) {
  const ErrorKind bad = ErrorKind::kBadRequest;
  expect_error("root ::= a b\na ::= \"x\"", bad, "grammar: rule 'b' is used but not defined (line 1, column 12)");
  expect_error("root ::= a b\n", bad,
               "grammar: rules 'a' (line 1, column 10), 'b' (line 1, column 12) are used but not defined");
  expect_error("a ::= \"x\"", bad, "grammar: no rule 'root'");
  expect_error("a ::= root", bad, "grammar: no rule 'root'");
  EXPECT_EQ(parse_error("a ::= \"x\"\nb ::= a a", "b").first, "");
  EXPECT_TRUE(sentence(parse_grammar("a ::= \"x\"\nb ::= a a", "b"), "xx"));
  expect_error("", bad, "grammar: empty (no rules)");
  expect_error("  # only a comment\n\n", bad, "grammar: empty (no rules)");
}

TEST(GrammarParse, LeftRecursionIsRefusedByName) {
  const ErrorKind bad = ErrorKind::kBadRequest;
  expect_error("root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]", bad,
               "grammar: rule 'expr' is left-recursive (expr -> expr, line 2, column 10)");
  // Through another rule, and hidden behind a rule that may be empty.
  expect_error("root ::= a\na ::= b \"x\"\nb ::= c a | \"y\"\nc ::= \"z\"?", bad,
               "grammar: rule 'a' is left-recursive (a -> b -> a, line 2, column 7)");
  expect_error("root ::= (\"k\"* root \"x\")?", bad,
               "grammar: rule 'root' is left-recursive (root -> root, line 1, column 16)");
}

TEST(GrammarParse, TailCyclesThroughEmptyRepetitionsAreAccepted) {
  // Repetitions of things that may be empty loop back to themselves without consuming input, at a
  // tail position: harmless for the matcher (the duplicate stack ends the expansion).
  for (const char* text : {"root ::= (\"a\"?)*", "root ::= (\"a\"*)*", "root ::= (\"a\"* | \"b\"?)+ \"c\"",
                           "root ::= x\nx ::= \"b\"? x | \"c\""}) {
    EXPECT_EQ(parse_error(text).first, "") << text;
  }
  auto g = parse_grammar("root ::= (\"a\"* | \"b\"?)+ \"c\"");
  EXPECT_TRUE(sentence(g, "c"));
  EXPECT_TRUE(sentence(g, "aababbc"));
  EXPECT_FALSE(prefix(g, "abca"));
  EXPECT_LE(GrammarMatcher(g).live_stacks(), 8u);
}

TEST(GrammarParse, Limits) {
  expect_error(std::string(kGrammarMaxBytes + 1, ' ') + "root ::= \"a\"", ErrorKind::kLimit,
               "grammar: 100013 bytes exceeds the limit of 100000");
  std::string deep = "root ::= " + std::string(201, '(') + "\"a\"" + std::string(201, ')');
  expect_error(deep, ErrorKind::kLimit, "grammar: line 1, column 210: groups nested deeper than 200");
  std::string ok = "root ::= " + std::string(200, '(') + "\"a\"" + std::string(200, ')');
  EXPECT_TRUE(sentence(parse_grammar(ok), "a"));
  expect_error("root ::= \"a\"{10001}", ErrorKind::kLimit, "grammar: line 1, column 13: repetition count exceeds 10000");
  EXPECT_TRUE(sentence(parse_grammar("root ::= \"a\"{3,10000}"), std::string(9000, 'a')));
  std::string big = "root ::= r0\n";
  for (int i = 0; i < 120; ++i) big.append("r").append(std::to_string(i)).append(" ::= \"a\"{10000}\n");
  auto [what, kind] = parse_error(big);
  EXPECT_EQ(kind, ErrorKind::kLimit) << what;
  EXPECT_NE(what.find("the compiled grammar would exceed 1048576 elements"), std::string::npos) << what;
}

TEST(GrammarParse, TooManyLiveStacksIsALimitNamingThePosition) {
  // After n "a"s every string of n "b"/"c" continuations is a distinct stack: 2^n of them (times
  // the three ways to go on from each).
  auto g = parse_grammar("root ::= s\ns ::= \"a\" s \"b\" | \"a\" s \"c\" | \"\"");
  GrammarMatcher m(g);
  m.accept(std::string(10, 'a'));
  EXPECT_GT(m.live_stacks(), 2048u);
  EXPECT_LE(m.live_stacks(), kGrammarMaxStacks);
  try {
    m.accept("a");
    FAIL() << "expected a limit error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kLimit);
    EXPECT_NE(std::string(e.what()).find("more than 4096 live stacks at rule 's', line 2"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(m.accepts("bc"));  // the failed call left the state as it was
}

// ---- constructs ---------------------------------------------------------------------------------

TEST(GrammarConstructs, LiteralsAndEscapes) {
  auto g = parse_grammar(R"~(root ::= "a\n\t\r\\\"\x41\u00e9\U0001F600" "\[\]\-" "" "z")~");
  EXPECT_TRUE(sentence(g, "a\n\t\r\\\"A\xC3\xA9\xF0\x9F\x98\x80[]-z"));
  EXPECT_FALSE(prefix(g, "a\n\t\r\\\"a"));
  auto raw = parse_grammar("root ::= \"line\nbreak\" \"日本\"");  // raw newline and UTF-8 inside a literal
  EXPECT_TRUE(sentence(raw, "line\nbreak日本"));
}

TEST(GrammarConstructs, ClassesRangesNegationEscapes) {
  auto g = parse_grammar(R"~(root ::= [a-cx\]\-\\] [^a-z\n] [\x30-\x39é-ë])~");
  EXPECT_TRUE(sentence(g, "b!0"));
  EXPECT_TRUE(sentence(g, "]Zê"));
  EXPECT_TRUE(sentence(g, "-\xE2\x82\xAC" "9"));  // € is not in a-z
  EXPECT_TRUE(sentence(g, "\\.5"));
  EXPECT_FALSE(prefix(g, "d"));
  EXPECT_FALSE(prefix(g, "aq"));
  EXPECT_FALSE(prefix(g, "a\n"));
  EXPECT_FALSE(prefix(g, "aAì"));
  // `-` first or last is itself; `^` not first is itself.
  auto edges = parse_grammar("root ::= [-a] [b-] [a^]");
  EXPECT_TRUE(sentence(edges, "--^"));
  EXPECT_TRUE(sentence(edges, "aba"));
}

TEST(GrammarConstructs, AnyCharacter) {
  auto g = parse_grammar("root ::= . . \"!\"");
  EXPECT_TRUE(sentence(g, "ab!"));
  EXPECT_TRUE(sentence(g, "\n\xF0\x9F\x98\x80!"));
  EXPECT_TRUE(sentence(g, std::string("\0x!", 3)));
  EXPECT_FALSE(prefix(g, "abc"));
}

TEST(GrammarConstructs, GroupsAndAlternatives) {
  auto g = parse_grammar("root ::= (\"a\" | \"b\" (\"c\" | \"d\") | ) \"e\" | \"f\"");
  for (const char* s : {"ae", "bce", "bde", "e", "f"}) EXPECT_TRUE(sentence(g, s)) << s;
  for (const char* s : {"be", "af", "fe", "cde"}) EXPECT_FALSE(sentence(g, s)) << s;
}

TEST(GrammarConstructs, Repetitions) {
  auto count = [](const char* text, int n) { return sentence(parse_grammar(text), std::string(n, 'a')); };
  for (int n = 0; n <= 6; ++n) {
    EXPECT_EQ(count("root ::= \"a\"*", n), true) << n;
    EXPECT_EQ(count("root ::= \"a\"+", n), n >= 1) << n;
    EXPECT_EQ(count("root ::= \"a\"?", n), n <= 1) << n;
    EXPECT_EQ(count("root ::= \"a\"{3}", n), n == 3) << n;
    EXPECT_EQ(count("root ::= \"a\"{2,}", n), n >= 2) << n;
    EXPECT_EQ(count("root ::= \"a\"{2,4}", n), n >= 2 && n <= 4) << n;
    EXPECT_EQ(count("root ::= \"a\"{0,2}", n), n <= 2) << n;
    EXPECT_EQ(count("root ::= \"a\"{ 1 , 3 }", n), n >= 1 && n <= 3) << n;
    EXPECT_EQ(count("root ::= (\"a\"{2})*", n), n % 2 == 0) << n;
    EXPECT_EQ(count("root ::= \"aa\"{1,2}", n), n == 2 || n == 4) << n;  // a repeated literal repeats whole
  }
  EXPECT_FALSE(prefix(parse_grammar("root ::= \"a\"{2,4}"), "aaaaa"));
  auto stacked = parse_grammar("root ::= \"a\"*? \"b\"");  // a postfix applies to the previous result
  EXPECT_TRUE(sentence(stacked, "aaab"));
  EXPECT_TRUE(sentence(stacked, "b"));
}

TEST(GrammarConstructs, CommentsNewlinesAndReferences) {
  auto g = parse_grammar(R"~(# a comment line
root ::=   # comment after ::=
  item ("," item)* # trailing comment

item ::= ( # newlines are free inside parentheses
    "x"
  | "y" item-2
  )
item-2 ::= "2" |
  "3"   # after `|` a rule continues on the next line
)~");
  EXPECT_TRUE(sentence(g, "x,y2,y3"));
  EXPECT_FALSE(prefix(g, "y4"));
}

TEST(GrammarConstructs, RecursionBalancedParentheses) {
  auto g = parse_grammar("root ::= p\np ::= (\"(\" p \")\")*");
  EXPECT_TRUE(sentence(g, "(()(()))()"));
  EXPECT_TRUE(prefix(g, "((("));
  EXPECT_FALSE(sentence(g, "((("));
  EXPECT_FALSE(prefix(g, "())"));
}

TEST(GrammarConstructs, CanEndAndMustEnd) {
  GrammarMatcher m(parse_grammar("root ::= \"ab\" \"c\"?"));
  EXPECT_FALSE(m.can_end());
  m.accept("ab");
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.must_end());
  m.accept("c");
  EXPECT_TRUE(m.must_end());
  EXPECT_FALSE(m.accepts("c"));
  EXPECT_TRUE(m.accepts(""));
  try {
    m.accept("c");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
  }
  EXPECT_TRUE(GrammarMatcher(parse_grammar("root ::= \"\"")).must_end());
  // A class that can match nothing (only surrogates) is no way forward.
  EXPECT_TRUE(GrammarMatcher(parse_grammar("root ::= [\\uD800-\\uDFFF]?")).must_end());
}

TEST(GrammarConstructs, PartialUtf8Characters) {
  auto g = parse_grammar("root ::= \"é\" [a-z]");
  GrammarMatcher m(g);
  EXPECT_TRUE(m.accepts("\xC3"));
  EXPECT_FALSE(m.accepts("\xC4"));      // Ā..Ŀ: not é
  EXPECT_FALSE(m.accepts("\xC3\xA8"));  // è
  m.accept("\xC3");
  EXPECT_FALSE(m.can_end());
  EXPECT_FALSE(m.accepts("a"));  // the character must be finished first
  m.accept("\xA9");
  EXPECT_TRUE(m.accepts("q"));
  // Only ASCII allowed: no lead byte can start anything.
  EXPECT_FALSE(GrammarMatcher(parse_grammar("root ::= [a-z]")).accepts("\xC3"));
  // A lead byte whose every completion is excluded by a negated class.
  auto not_cyrillic = parse_grammar("root ::= [^\\u0400-\\u04FF]");
  EXPECT_FALSE(GrammarMatcher(not_cyrillic).accepts("\xD0"));
  EXPECT_TRUE(GrammarMatcher(not_cyrillic).accepts("\xD5"));
  // Four-byte characters split in every place.
  auto emoji = parse_grammar("root ::= [\\U0001F600-\\U0001F64F]+");
  GrammarMatcher e(emoji);
  for (char c : std::string("\xF0\x9F\x98\x80\xF0\x9F\x99\x8F")) {
    ASSERT_TRUE(e.accepts(std::string(1, c)));
    e.accept(std::string(1, c));
  }
  EXPECT_TRUE(e.can_end());
  EXPECT_FALSE(e.accepts("\xF0\x9F\x9A"));  // U+1F680.. is outside
}

TEST(GrammarConstructs, InvalidUtf8IsNeverAccepted) {
  auto g = parse_grammar("root ::= .*");
  for (const char* bad : {"\x80", "\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xED\xA0\x80", "\xF0\x80\x80\x80",
                          "\xF4\x90\x80\x80", "\xF5", "\xFF", "\xC3\x41", "\xE3\x81\xE3"}) {
    EXPECT_FALSE(prefix(g, bad)) << testing::PrintToString(std::string(bad));
  }
  EXPECT_TRUE(sentence(g, "\xED\x9F\xBF\xEE\x80\x80\xF4\x8F\xBF\xBF"));  // U+D7FF, U+E000, U+10FFFF
}

// ---- whole grammars -----------------------------------------------------------------------------

constexpr const char* kJson = test::kJsonGbnf;

TEST(GrammarWhole, Json) {
  auto g = parse_grammar(kJson);
  for (const char* ok : {R"~({"a": [1, -2.5e+3, true, null, "x\u00e9\n"], "b": {}})~", "[]", " 0 ", "\"日本語\"",
                         R"~([[[[]]], {"k": [{"q": false}]}])~", "-0.0E7"}) {
    EXPECT_TRUE(sentence(g, ok)) << ok;
  }
  for (const char* bad : {R"~({"a" 1})~", "[1,]", "01", "\"\\x\"", "{'a': 1}", "[1 2]", "tru", "\"a\nb\""}) {
    EXPECT_FALSE(sentence(g, bad)) << bad;
  }
  EXPECT_TRUE(prefix(g, R"~({"a": [1, {"b": "c)~"));
  EXPECT_FALSE(prefix(g, R"~({"a": [1, {"b": "c"]})~"));
  GrammarMatcher m(g);
  m.accept(R"~({"key": "val)~");
  EXPECT_LE(m.live_stacks(), 4u);  // inside a string: close it, escape, or another character
}

constexpr const char* kArithmetic = R"~(root   ::= (expr "=" ws term "\n")+
expr   ::= term ( [-+*/] term )*
term   ::= name | int | "(" ws expr ")" ws
name   ::= [a-z] [a-z0-9_]* ws
int    ::= [0-9]+ ws
ws     ::= " "*
)~";

TEST(GrammarWhole, Arithmetic) {
  auto g = parse_grammar(kArithmetic);
  EXPECT_TRUE(sentence(g, "x1 +(y*3) =  4\n( a )-b=c\n"));
  EXPECT_FALSE(sentence(g, "x + = 4\n"));
  EXPECT_FALSE(sentence(g, "x = 4"));  // every equation ends with a newline
  EXPECT_FALSE(prefix(g, "((x)"
                         "\n"));
}

constexpr const char* kList = R"~(root ::= item{1,3}
item ::= "- " [^\n\r\u2028]+ "\n"
)~";

TEST(GrammarWhole, ListOfItems) {
  auto g = parse_grammar(kList);
  EXPECT_TRUE(sentence(g, "- milk\n- eggs and ham\n"));
  EXPECT_FALSE(sentence(g, "- \n"));
  EXPECT_FALSE(prefix(g, "- a\n- b\n- c\n-"));  // at most three items
  GrammarMatcher m(g);
  m.accept("- a\n- b\n- c\n");
  EXPECT_TRUE(m.must_end());
}

// The syntax forms found in llama.cpp's grammars/ (json.gbnf, json_arr.gbnf, arithmetic.gbnf,
// list.gbnf, c.gbnf, chess.gbnf, english.gbnf, japanese.gbnf, extreme.gbnf), each used here in a
// grammar of our own:
//   comments on their own line and after a symbol; a comment right after `|` at the end of a line;
//   a rule body starting on the line after `::=`; multi-line groups; an empty first alternative
//   (`ws ::= | " "`); `{4}` / `{0,15}` / `{0,20}`; escapes \x7F \x00-\x1F \u2028 \U0010FFFF in
//   classes; `[^"\\...]` with an escaped backslash and a raw quote; a class holding raw `[`, an
//   escaped `]`, `,-.` (a range), `{|}` and a backquote; raw UTF-8 ranges such as [ぁ-ゟ];
//   multi-range classes like [_a-bdg-hj-kn-qu-z]; `-` first in a class ([-+*/]); a reference
//   followed by `(` with no space (factor((...)...)); `(x)*` around a single reference;
//   alternatives of parenthesized sequences, one per line, each line ending in `|`; `"-O"?`;
//   [1-9] [0-9]? digit sequences; names with dashes and digits; CRLF line ends.
TEST(GrammarWhole, LlamaCppSyntaxForms) {
  const std::string text =
      "# forms from llama.cpp's grammars\r\n"
      "root ::= (decl)* rest\r\n"
      "decl ::=\r\n"
      "  ( kind ws name \"(\" args? \")\" ws ) |\r\n"
      "  ( \"//\" [^\\n]* \"\\n\" )\r\n"
      "kind ::= \"int\" | \"char\"\r\n"
      "name ::= [_a-bdg-hj-kn-qu-z] [A-Za-z0-9_]*\r\n"
      "args ::= term((\",\" | \";\") ws term)*\r\n"
      "term ::= [-+*/]? [1-9] [0-9]? | esc\r\n"
      "esc  ::= \"\\\\\" ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4}) # escapes\r\n"
      "rest ::= ( \"O-O\" \"-O\"? | jp-char{1,3} | punct+ | str ) ws\r\n"
      "jp-char ::= [ぁ-ゟ] | [ァ-ヿ] | # a comment after the bar\r\n"
      "    [一-鿿]\r\n"
      "punct ::= [!\"#$%&'()*+,-./:;<=>?@[\\\\\\]^_`{|}~]\r\n"
      "str ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F\\u2028] | [\\U0001F600-\\U0010FFFF] )* \"\\\"\"\r\n"
      "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\r\n";
  auto g = parse_grammar(text);
  EXPECT_TRUE(sentence(g, "int a(1,+2; \\u00fF) // note\nO-O-O"));
  EXPECT_TRUE(sentence(g, "char b_9() ひらカ\n\t"));
  EXPECT_TRUE(sentence(g, "[,]\\{|}~` "));
  EXPECT_TRUE(sentence(g, "\"quote \xF0\x9F\x98\x80\""));
  EXPECT_FALSE(prefix(g, "int c"));      // c is not in the name's first class
  EXPECT_FALSE(prefix(g, "int a(0"));    // [1-9] first
  EXPECT_FALSE(prefix(g, "ぁぁぁぁ"));  // {1,3}
  EXPECT_FALSE(prefix(g, "\"\x7F"));
  EXPECT_FALSE(prefix(g, "\"\xE2\x80\xA8"));  // U+2028
}

TEST(GrammarWhole, ChessMoves) {
  auto g = parse_grammar(R"~(root ::= "1. " turn ([1-9] [0-9]? ". " turn)*
turn ::= move " " move "\n"
move ::= (pawn | piece | castle) [+#]?
piece ::= [NBKQR] [a-h]? [1-8]? "x"? [a-h] [1-8]
pawn ::= ([a-h] "x")? [a-h] [1-8] ("=" [NBKQR])?
castle ::= "O-O" "-O"?
)~");
  EXPECT_TRUE(sentence(g, "1. e4 e5\n2. Nf3 Nc6\n10. O-O-O exd8=Q#\n"));
  EXPECT_FALSE(prefix(g, "1. e9"));
}

// ---- the token mask -----------------------------------------------------------------------------

// A vocabulary with single bytes, words, JSON punctuation, whole multi-byte characters and pieces
// of them (tokens that end or begin inside a character), and an empty token.
std::vector<std::string> small_vocab() {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, static_cast<char>(b)));
  for (const char* t : {"", "{\"", "\":", "\",", "\"}", "},", "[{", "]}", "true", "false", "null", "nu", "ll", "12",
                        "0.", "e+", "-1", "\\u", "00", "e9", "\\\"", "\\n", " ", "  ", "\n", " \"", "ab", "x1",
                        " + ", "(", "= ", "- ", "milk\n", "é", "\xC3", "\xA9", "é\"", "\"é", "日本", "\xE6\x97",
                        "\xA5", "\xE6", "\x97\xA5", "😀", "\xF0\x9F", "\x98\x80", "\xF0\x9F\x98", "\x80\"", "a\xC3",
                        "\xA9z", "O-O", "-O", "Nf3", " e4", "1. ", "ひら", "\xC0\x80", "\xED\xA0\x80"}) {
    v.push_back(t);
  }
  v.push_back("ab");  // a duplicate: both ids get the same answer
  return v;
}

// At each state along `text` (advanced one byte at a time, so some states hold half a
// character), the mask equals accepts() of each token on a copy of the matcher.
void check_mask_along(const std::shared_ptr<const Grammar>& g, const std::string& text,
                      const std::vector<std::string>& vocab) {
  TokenTrie trie(vocab);
  ASSERT_EQ(trie.size(), vocab.size());
  GrammarMatcher m(g);
  std::vector<uint8_t> allowed;
  for (size_t i = 0; i <= text.size(); ++i) {
    m.allowed_tokens(trie, allowed);
    ASSERT_EQ(allowed.size(), vocab.size());
    GrammarMatcher fresh(m);  // a copy starts with an empty cache: an independent computation
    for (size_t t = 0; t < vocab.size(); ++t) {
      const bool want = !vocab[t].empty() && fresh.accepts(vocab[t]);
      ASSERT_EQ(allowed[t] != 0, want) << "after " << i << " bytes of " << testing::PrintToString(text) << ", token "
                                       << t << " " << testing::PrintToString(vocab[t]);
    }
    if (i < text.size()) m.accept(text.substr(i, 1));
  }
}

TEST(GrammarMask, EqualsAcceptsTokenByToken) {
  const auto vocab = small_vocab();
  check_mask_along(parse_grammar(kJson), R"~({"k\u00e9y": ["é日本😀", -1.5e+3, true, null], "z": {}})~", vocab);
  check_mask_along(parse_grammar(kArithmetic), "x1 +(y*3) = 4\nab=c\n", vocab);
  check_mask_along(parse_grammar(kList), "- milk é\n- 日本😀\n", vocab);
  check_mask_along(parse_grammar("root ::= [ぁ-ゟ]+ (\" \" [^\\x00-\\x7F]+)*"), "ひらがな 日本😀é", vocab);
}

TEST(GrammarMask, RandomVocabularyAndWalks) {
  // Random tokens over the bytes the JSON grammar cares about, against random valid JSON prefixes.
  std::mt19937 rng(7);
  const std::string alphabet = "{}[]\",:0123456789.-+eE \\utrfalsnxé日\n";
  std::vector<std::string> vocab = small_vocab();
  for (int i = 0; i < 3000; ++i) {
    std::string t;
    int len = 1 + static_cast<int>(rng() % 6);
    for (int k = 0; k < len; ++k) t += alphabet[rng() % alphabet.size()];  // may split é and 日
    vocab.push_back(t);
  }
  auto g = parse_grammar(kJson);
  TokenTrie trie(vocab);
  for (int walk = 0; walk < 5; ++walk) {
    GrammarMatcher m(g);
    std::vector<uint8_t> allowed;
    for (int step = 0; step < 40; ++step) {
      m.allowed_tokens(trie, allowed);
      GrammarMatcher fresh(m);
      std::vector<size_t> ok;
      for (size_t t = 0; t < vocab.size(); ++t) {
        ASSERT_EQ(allowed[t] != 0, !vocab[t].empty() && fresh.accepts(vocab[t])) << "token " << t;
        if (allowed[t]) ok.push_back(t);
      }
      if (ok.empty()) break;
      m.accept(vocab[ok[rng() % ok.size()]]);
    }
  }
}

TEST(GrammarMask, CopiesAreIndependent) {
  auto g = parse_grammar(kJson);
  GrammarMatcher a(g);
  a.accept("[1");
  GrammarMatcher b = a;
  b.accept(", 2]");
  EXPECT_TRUE(b.can_end());
  EXPECT_FALSE(a.can_end());
  EXPECT_TRUE(a.accepts("]"));
  a = b;
  EXPECT_TRUE(a.can_end());
  GrammarMatcher c(std::move(a));
  EXPECT_TRUE(c.can_end());
}

TEST(GrammarMask, SurvivesCacheRebuilds) {
  // Every character moves to a new state (a 10000-step chain), so the cache outgrows its budget
  // and is rebuilt from the current state along the way.
  auto g = parse_grammar("root ::= [a-z]{0,10000} \"!\"");
  const std::vector<std::string> vocab = {"a", "zz", "!", "a!", "b", "\xC3"};
  TokenTrie trie(vocab);
  GrammarMatcher m(g);
  std::vector<uint8_t> allowed;
  for (int i = 0; i < 9990; ++i) {
    if (i % 500 == 0) {
      m.allowed_tokens(trie, allowed);
      EXPECT_EQ(allowed, (std::vector<uint8_t>{1, 1, 1, 1, 1, 0})) << i;
    }
    m.accept(i % 2 ? "a" : "b");
  }
  EXPECT_TRUE(m.accepts(std::string(10, 'q') + "!"));
  EXPECT_FALSE(m.accepts(std::string(11, 'q')));
  GrammarMatcher copy(m);
  copy.accept("zz!");
  EXPECT_TRUE(copy.must_end());
}

TEST(GrammarParse, MutatedGrammarsFailCleanly) {
  // Random edits of a real grammar either parse (and then match without trouble) or throw a
  // graft::Error of a request kind; nothing else escapes and nothing crashes.
  std::mt19937 rng(99);
  const std::string base = kJson;
  const std::string pieces = "()[]{}|*+?\"\\^-.,:=# \n\tab0x9u";
  int parsed = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string t = base;
    for (int e = 0, edits = 1 + static_cast<int>(rng() % 3); e < edits; ++e) {
      size_t at = rng() % t.size();
      switch (rng() % 3) {
        case 0: t.erase(at, 1 + rng() % 3); break;
        case 1: t.insert(at, 1, pieces[rng() % pieces.size()]); break;
        default: t[at] = static_cast<char>(rng() % 256); break;
      }
    }
    try {
      GrammarMatcher m(parse_grammar(t));
      ++parsed;
      std::string input;
      for (int k = 0; k < 40; ++k) input += "{\"a\": [1, \"x\"]}"[rng() % 16];
      (void)m.accepts(input);
    } catch (const Error& e) {
      EXPECT_TRUE(e.kind() == ErrorKind::kBadRequest || e.kind() == ErrorKind::kLimit ||
                  e.kind() == ErrorKind::kUnsupported)
          << e.what();
      // Messages go back to clients in JSON: they must be valid UTF-8 whatever the input was.
      EXPECT_TRUE(GrammarMatcher(parse_grammar("root ::= .*")).accepts(e.what())) << e.what();
    }
  }
  EXPECT_GT(parsed, 100);  // many edits land in comments, names or literals and still parse
}

TEST(GrammarMask, TrieShape) {
  TokenTrie trie({"ab", "a", "", "abc", "b", "ab"});
  EXPECT_EQ(trie.size(), 6u);
  EXPECT_EQ(trie.node_count(), 4u);  // a, ab, abc, b
  EXPECT_EQ(trie.max_length(), 3u);
  GrammarMatcher m(parse_grammar("root ::= \"ab\" \"c\"?"));
  std::vector<uint8_t> allowed;
  m.allowed_tokens(trie, allowed);
  EXPECT_EQ(allowed, (std::vector<uint8_t>{1, 1, 0, 1, 0, 1}));
}

}  // namespace
}  // namespace graft::engine
