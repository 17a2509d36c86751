// printf-style formatting into a std::string, for tables and messages; counts for humans.
#pragma once

#include <cstdint>
#include <string>

namespace kvserve {

// Formats like snprintf; the result is not truncated.
std::string StrFormat(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// "260K", "135M", "1.24B" (powers of 1000).
std::string HumanCount(int64_t count);

// "512 B", "1.50 KB", "34.5 MB", "1.23 GB" (powers of 1024; two decimals below 10).
std::string HumanBytes(int64_t bytes);

// Escapes & < > " ' as markupsafe (jinja2's escape filter) does: &amp; &lt; &gt; &#34; &#39;.
// Safe in HTML and XML text and attribute values.
std::string HtmlEscape(const std::string& s);

}  // namespace kvserve
